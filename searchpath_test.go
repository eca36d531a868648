package trellis

import "testing"

func TestWithoutSchema(t *testing.T) {
	for _, tc := range []struct {
		setting, user, schema, want string
		changed                     bool
	}{
		{`"$user", public`, "app", "trellis", `"$user", public`, false},
		{`"$user", public`, "trellis", "trellis", `public`, true},
		{`trellis, public`, "app", "trellis", `public`, true},
		{`"Trellis", public`, "app", "Trellis", `public`, true},
		{`Trellis, public`, "app", "trellis", `public`, true},
		{`public`, "trellis", "trellis", `public`, false},
		{`"$user"`, "trellis", "trellis", ``, true},
	} {
		got, changed := withoutSchema(tc.setting, tc.user, tc.schema)
		if got != tc.want || changed != tc.changed {
			t.Errorf("withoutSchema(%q, %q, %q) = %q, %v; want %q, %v", tc.setting, tc.user, tc.schema, got, changed, tc.want, tc.changed)
		}
	}
}
