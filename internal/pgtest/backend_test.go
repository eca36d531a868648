package pgtest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

func TestChooseBackend(t *testing.T) {
	const goodDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	noDocker := errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
	tests := []struct {
		name    string
		env     map[string]string
		binDir  string // "" means no binaries
		docker  error
		want    backend
		wantErr []string // substrings of the error; nil means no error
		probed  bool     // whether the Docker probe may run
	}{
		{
			name:   "dsn wins over binaries",
			env:    map[string]string{EnvDSN: goodDSN},
			binDir: "/usr/lib/postgresql/15/bin",
			want:   backend{kind: backendExternal, dsn: goodDSN},
		},
		{
			name:   "dsn wins with nothing else",
			env:    map[string]string{EnvDSN: "host=db user=postgres"},
			docker: noDocker,
			want:   backend{kind: backendExternal, dsn: "host=db user=postgres"},
		},
		{
			name:    "invalid dsn",
			env:     map[string]string{EnvDSN: "postgres://[::1"},
			binDir:  "/usr/lib/postgresql/15/bin",
			wantErr: []string{EnvDSN + " is not a valid connection string"},
		},
		{
			name:   "local binaries without probing docker",
			binDir: "/usr/lib/postgresql/15/bin",
			want:   backend{kind: backendLocal, binDir: "/usr/lib/postgresql/15/bin"},
		},
		{
			name:   "container with the default image",
			probed: true,
			want:   backend{kind: backendContainer, image: DefaultImage},
		},
		{
			name:   "container with an overridden image",
			env:    map[string]string{EnvImage: "postgres:16-alpine"},
			probed: true,
			want:   backend{kind: backendContainer, image: "postgres:16-alpine"},
		},
		{
			name:   "nothing available",
			docker: noDocker,
			probed: true,
			wantErr: []string{
				"no PostgreSQL server for the tests",
				"install the PostgreSQL 15 server binaries",
				"set " + EnvDSN,
				"run a Docker engine",
				noDocker.Error(),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probedDocker := false
			p := probes{
				getenv: func(k string) string { return tt.env[k] },
				findBinDir: func() (string, error) {
					if tt.binDir == "" {
						return "", pgserver.ErrNoBinaries
					}
					return tt.binDir, nil
				},
				docker: func(context.Context) error {
					probedDocker = true
					return tt.docker
				},
			}
			got, err := chooseBackend(context.Background(), p)
			if probedDocker && !tt.probed {
				t.Error("probed Docker although an earlier option was available")
			}
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("chooseBackend = %+v, want an error", got)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("chooseBackend: %v", err)
			}
			if got != tt.want {
				t.Errorf("chooseBackend = %+v (%v), want %+v (%v)", got, got.kind, tt.want, tt.want.kind)
			}
		})
	}
	// The no-server error is recognisable without matching text.
	_, err := chooseBackend(context.Background(), probes{
		getenv:     func(string) string { return "" },
		findBinDir: func() (string, error) { return "", pgserver.ErrNoBinaries },
		docker:     func(context.Context) error { return errors.New("no engine") },
	})
	if !errors.Is(err, errNoServer) {
		t.Errorf("error %v does not wrap errNoServer", err)
	}
}
