package pgserver

import (
	"os"
	"path/filepath"
	"testing"
)

func TestVersionOf(t *testing.T) {
	tests := []struct {
		dir  string
		want float64
	}{
		{"/usr/lib/postgresql/15/bin", 15},
		{"/usr/lib/postgresql/9.6/bin", 9.6},
		{"/usr/lib/postgresql/devel/bin", -1},
	}
	for _, tt := range tests {
		if got := versionOf(tt.dir); got != tt.want {
			t.Errorf("versionOf(%q) = %v, want %v", tt.dir, got, tt.want)
		}
	}
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"127.0.0.1", "'127.0.0.1'"},
		{"it's", "'it''s'"},
	}
	for _, tt := range tests {
		if got := quote(tt.in); got != tt.want {
			t.Errorf("quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestFindBinDir(t *testing.T) {
	dir, err := FindBinDir()
	if err != nil {
		t.Skipf("no PostgreSQL binaries here: %v", err)
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("FindBinDir() = %s, but %s: %v", dir, name, err)
		}
	}
}
