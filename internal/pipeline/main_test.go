package pipeline

import (
	"testing"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestMain starts the package's throwaway PostgreSQL (internal/pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }
