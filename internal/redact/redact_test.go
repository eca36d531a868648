package redact

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestText(t *testing.T) {
	for _, c := range []struct{ in, secret string }{
		{"dial postgres://app:s3cret-pw@db:5432/shop failed", "s3cret-pw"},
		{"postgresql://app:p%40ss@db/shop", "p%40ss"},
		{"host=db user=app password=s3cret-pw dbname=shop", "s3cret-pw"},
		{`host=db password='it\'s secret' dbname=shop`, "secret"},
		{"postgres://app@db/shop?sslmode=disable&password=s3cret-pw", "s3cret-pw"},
		{"sslpassword = s3cret-pw", "s3cret-pw"},
	} {
		if got := Text(c.in); strings.Contains(got, c.secret) || !strings.Contains(got, Mask) {
			t.Errorf("Text(%q) = %q", c.in, got)
		}
	}
	if got := Text("user=app host=db port=5432"); got != "user=app host=db port=5432" {
		t.Errorf("Text changed a string without a password: %q", got)
	}
}

func TestMasker(t *testing.T) {
	dsn := "postgres://app:hunter2%2Fx@db:5432/shop"
	m := New(Secrets(dsn, "host=db password=other-pw", "postgres://u:broken:pw@h:port/db")...)
	for _, s := range []string{"auth failed for hunter2/x", "raw hunter2%2Fx", "other-pw leaked", "broken:pw here"} {
		if got := m.String(s); strings.Contains(got, "hunter2") || strings.Contains(got, "other-pw") || strings.Contains(got, "broken:pw") {
			t.Errorf("String(%q) = %q", s, got)
		}
	}
	_, err := pgconn.ParseConfig("postgres://app:s3cret@db:notaport/x")
	if err == nil {
		t.Fatal("parsed")
	}
	if got := ParseError(err); strings.Contains(got, "s3cret") || strings.Contains(got, "postgres://") {
		t.Errorf("ParseError = %q", got)
	}
}
