// Command plantsweep runs the generative fast lane once per planted bug
// (a `go test -tags trellisplant` build with TRELLIS_TEST_PLANT set) and
// reports the catch rate: a bug is caught when the lane fails and names
// the failing seed. A baseline run with no bug planted must pass.
//
//	go run ./generative/cmd/plantsweep
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/trellis-repl/trellis-repl/generative"
	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// planted are the bugs the fast lane must catch, and those a test of
// their own catches (catchers).
var planted = []string{
	plant.SkipLedgerUpdate, plant.StaleRead, plant.DropOldKey,
	plant.KeepEmptyGroup, plant.ConfirmBeforeRecord, plant.SkipVisibilityWait,
	plant.IgnoreLeftJoinNulls, plant.SkipDimensionChange, plant.DrainSkipsOpenTxn,
	plant.HoldWholeBatch, plant.DoneClearsRedirtied, plant.FlattenNullableComputed,
	plant.ExistsMissesLastDelete, plant.StaleScalar, plant.WindowPartitionStale, plant.TopKNoRefill,
	plant.ApplierConnectionPerTransform, plant.RecursiveAnchorStale,
	plant.TrustStoreAfterPromotion, plant.ColumnBuildSkipsNewChanges, plant.SubqueryAnswerUnchecked,
}

// catcher is the test that must fail with a bug planted: a resource
// bound rather than a wrong row, which the fast lane's small programs
// cannot show.
type catcher struct{ pkg, test string }

// catchers name the bugs not caught by the fast lane, and what catches
// each; a catch is then the test failing.
var catchers = map[string]catcher{
	plant.ApplierConnectionPerTransform: {"./internal/scaletest/", "^TestConnectionBudget$"},
	// The fast lane's scalars rarely move a row across their comparison.
	plant.StaleScalar: {"./", "^TestScalarMoves$"},
	// The fast lane draws no recursive CTE (ADR 0035).
	plant.RecursiveAnchorStale: {"./", "^TestRecursive$"},
	// The fast lane restores no database to an earlier point (ADR 0039).
	plant.TrustStoreAfterPromotion: {"./", "^TestPointInTimeRestore$"},
	// A column build needs an ALTER TRANSFORM the fast lane does not draw.
	plant.ColumnBuildSkipsNewChanges: {"./", "^TestAlterTransform$"},
	// The race needs a level held back while its owner re-derives (ADR
	// 0043): the fast lane meets it rarely, under load (CI stop 34).
	plant.SubqueryAnswerUnchecked: {"./", "^TestSubqueryAheadOfItsLevel$"},
}

func main() {
	only := flag.String("only", "", "comma-separated bugs to sweep (default: all)")
	baseline := flag.Bool("baseline", true, "first run the lane with the tag and no bug planted (must pass)")
	verbose := flag.Bool("v", false, "print each run's output")
	random := flag.Int("random", 0, "random cases added to the fixed ones (TRELLIS_GEN_RANDOM)")
	flag.Parse()
	root, err := generative.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bugs := planted
	if *only != "" {
		bugs = strings.Split(*only, ",")
		for _, b := range bugs {
			// An unknown name plants nothing, and its clean run would be
			// reported as a bug not caught.
			if !slices.Contains(planted, b) {
				fmt.Fprintf(os.Stderr, "plantsweep: -only: %q is not a planted bug; the planted bugs are %s\n", b, strings.Join(planted, ", "))
				os.Exit(2)
			}
		}
	}
	seedRe := regexp.MustCompile(`seed=\d+ profile=\S+ FAILED: .*`)
	run := func(bug string) (bool, string, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		pkg, test := "./generative/", "^TestFastLane$"
		if c, ok := catchers[bug]; ok {
			pkg, test = c.pkg, c.test
		}
		cmd := exec.CommandContext(ctx, "go", "test", "-tags", "trellisplant", "-count=1", "-timeout", "19m",
			"-run", test, "-v", pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), plant.EnvVar+"="+bug, "TRELLIS_GEN_SHRINK=0", fmt.Sprintf("TRELLIS_GEN_RANDOM=%d", *random))
		var out bytes.Buffer
		var w io.Writer = &out
		if *verbose {
			w = io.MultiWriter(&out, os.Stdout)
		}
		cmd.Stdout, cmd.Stderr = w, w
		start := time.Now()
		err := cmd.Run()
		m := seedRe.FindString(out.String())
		if _, ok := catchers[bug]; ok && err != nil {
			m = "--- FAIL: " + strings.Trim(test, "^$")
		}
		return err != nil, m, time.Since(start)
	}
	if *baseline {
		failed, m, d := run("")
		fmt.Printf("%-22s %-8s %6s  %s\n", "(no bug planted)", map[bool]string{true: "FAILED", false: "passed"}[failed], d.Round(time.Second), m)
		if failed {
			fmt.Println("the baseline must pass; fix that first")
			os.Exit(1)
		}
	}
	caught := 0
	for _, bug := range bugs {
		failed, m, d := run(bug)
		status := "missed"
		if failed && m != "" {
			status = "caught"
			caught++
		} else if failed {
			status = "failed?" // failed without naming a seed: not a catch
		}
		fmt.Printf("%-22s %-8s %6s  %s\n", bug, status, d.Round(time.Second), m)
	}
	fmt.Printf("catch rate: %d/%d\n", caught, len(bugs))
	if caught < len(bugs) {
		os.Exit(1)
	}
}
