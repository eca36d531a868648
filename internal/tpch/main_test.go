package tpch

import (
	"testing"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
