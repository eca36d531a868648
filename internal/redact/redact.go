// Package redact keeps passwords out of what trellis-repl logs and prints:
// connection strings in free text (URL userinfo, password= and
// sslpassword= in key=value and query form) and, literally, the passwords
// the configured connection strings and PGPASSWORD carry.
package redact

import (
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mask replaces a password.
const Mask = "xxxxx"

var (
	urlUserinfo = regexp.MustCompile(`(postgres(?:ql)?://[^:@/\s]*):[^@\s]*@`)
	keyValue    = regexp.MustCompile(`(?i)((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)`)
)

// Text masks every password a connection string in s may show.
func Text(s string) string {
	s = urlUserinfo.ReplaceAllString(s, "${1}:"+Mask+"@")
	return keyValue.ReplaceAllString(s, "${1}"+Mask)
}

// Masker masks the patterns of Text and the literal passwords it was given.
type Masker struct {
	secrets []string
}

// New returns a Masker for secrets (empty ones are ignored), longest
// first so that a password containing another is masked whole.
func New(secrets ...string) *Masker {
	m := &Masker{}
	seen := map[string]bool{}
	for _, s := range secrets {
		for _, v := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
			if v != "" && !seen[v] {
				seen[v] = true
				m.secrets = append(m.secrets, v)
			}
		}
	}
	for i := 1; i < len(m.secrets); i++ {
		for j := i; j > 0 && len(m.secrets[j]) > len(m.secrets[j-1]); j-- {
			m.secrets[j], m.secrets[j-1] = m.secrets[j-1], m.secrets[j]
		}
	}
	return m
}

// String masks s.
func (m *Masker) String(s string) string {
	s = Text(s)
	if m == nil {
		return s
	}
	for _, v := range m.secrets {
		s = strings.ReplaceAll(s, v, Mask)
	}
	return s
}

// Secrets are the passwords the connection strings and the environment
// carry: each DSN's own (as libpq would use it, PGPASSWORD and the
// password file included) and PGPASSWORD.
func Secrets(dsns ...string) []string {
	out := []string{os.Getenv("PGPASSWORD")}
	for _, d := range dsns {
		if d == "" {
			continue
		}
		if cfg, err := pgconn.ParseConfig(d); err == nil {
			out = append(out, cfg.Password)
			continue
		}
		out = append(out, guess(d)...)
	}
	return out
}

// guess finds the passwords of a connection string that does not parse:
// what lies between the userinfo's ':' and its last '@', and password=
// values.
func guess(d string) []string {
	var out []string
	for _, pre := range []string{"postgres://", "postgresql://"} {
		if rest, ok := strings.CutPrefix(d, pre); ok {
			if at := strings.LastIndex(rest, "@"); at >= 0 {
				if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
					out = append(out, pw)
				}
			}
		}
	}
	for _, m := range keyValue.FindAllStringSubmatch(d, -1) {
		out = append(out, strings.Trim(m[2], "'"))
	}
	return out
}

// ParseError is the text of a connection-string parse error without the
// connection string it quotes (pgx masks passwords in it on a best-effort
// basis only).
func ParseError(err error) string {
	s := err.Error()
	if strings.HasPrefix(s, "cannot parse `") {
		if i := strings.LastIndex(s, "`: "); i >= 0 {
			s = s[i+3:]
		}
	}
	return Text(s)
}
