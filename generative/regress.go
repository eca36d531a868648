package generative

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// RegressionExt is the file extension of regression programs.
const RegressionExt = ".trellis"

// RegressionDir is testdata/regressions under the module root. Programs
// directly in it are replayed by the regression test and must pass; new
// findings are written to its pending/ subdirectory, to be moved up once
// the bug they show is fixed.
func RegressionDir() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "testdata", "regressions"), nil
}

// LoadRegressions reads every program directly in dir, by file name.
func LoadRegressions(dir string) (map[string]*Program, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	out := map[string]*Program{}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), RegressionExt) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		p, err := Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		out[e.Name()] = p
	}
	return out, nil
}

// SortedNames returns a map's keys in order.
func SortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WriteRegression writes a failing (shrunk) program with its failure as a
// comment into dir, named by seed and content, and returns the path.
func WriteRegression(dir string, p *Program, f *Failure) (string, error) {
	q := p.Clone()
	note := []string{}
	if q.Note != "" {
		note = append(note, q.Note)
	}
	if f != nil {
		note = append(note, fmt.Sprintf("found: %s at step %s", f.Kind, f.Step))
		for _, l := range strings.Split(f.Msg, "\n") {
			note = append(note, "  "+l)
		}
	}
	q.Note = strings.Join(note, "\n")
	text := q.Format()
	sum := sha256.Sum256([]byte(p.Format()))
	name := fmt.Sprintf("seed%d-%s-%s%s", p.Seed, p.Profile, hex.EncodeToString(sum[:4]), RegressionExt)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, []byte(text), 0o644)
}
