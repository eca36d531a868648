package engine

// parse.go owns the definition language's statements: ParseStatements splits
// a script into statements with PostgreSQL's own scanner, stmtParser reads
// CREATE, PAUSE, RESUME and DROP TRANSFORM (their names and options, up to
// the SELECT), and position and pgError place an error in the script. The
// SELECT itself is checked by parseSelect (select.go).

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"github.com/pganalyze/pg_query_go/v5/parser"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// ParseStatements parses a script of one or more definition-language
// statements (docs/sql-support.md) separated by ';' (comments allowed) and
// validates each CREATE TRANSFORM query against the supported subset.
//
// The statement prefixes are recognised here; the SELECT is parsed by
// PostgreSQL's own parser (pg_query). Every error is a *terr.Error with code
// terr.Validation (terr.Internal only if the bundled parser misbehaves), and
// its sentence starts with `transform "<name>": ` once the name is known.
//
// GROUP BY name resolution: a bare name in GROUP BY that equals a select
// item's output name is resolved to that item's expression, unless the item
// is itself a plain reference to a column of that name (then both readings
// agree). PostgreSQL prefers an input column of that name, which only the
// catalog can tell, so such entries are recorded in Query.GroupByAlias for
// the catalog-aware validator to check.
func ParseStatements(script string) ([]Statement, error) {
	if !utf8.ValidString(script) {
		off := 0
		for off < len(script) {
			r, size := utf8.DecodeRuneInString(script[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return nil, terr.New(terr.Validation, "script: invalid UTF-8 at byte %d (%s); PostgreSQL stores definitions as UTF-8, fix the file's encoding", off, position(script[:off], off))
	}
	scan, err := pg_query.Scan(script)
	if err != nil {
		return nil, pgError("script", script, 0, script, err)
	}
	var (
		stmts []Statement
		toks  []*pg_query.ScanToken
	)
	flush := func(end int) error {
		if len(toks) == 0 {
			return nil // empty statement (";;" or comments only)
		}
		p := &stmtParser{script: script, toks: toks, end: end, label: fmt.Sprintf("statement %d", len(stmts)+1)}
		st, err := p.parse()
		if err != nil {
			return err
		}
		stmts = append(stmts, st)
		toks = nil
		return nil
	}
	for _, t := range scan.Tokens {
		if t.Start < 0 || t.End < t.Start || int(t.End) > len(script) {
			return nil, terr.New(terr.Internal, "script: the SQL scanner returned a token outside the script")
		}
		switch t.Token {
		case pg_query.Token_SQL_COMMENT, pg_query.Token_C_COMMENT:
		case pg_query.Token_ASCII_59:
			if err := flush(int(t.Start)); err != nil {
				return nil, err
			}
		default:
			toks = append(toks, t)
		}
	}
	if err := flush(len(script)); err != nil {
		return nil, err
	}
	if len(stmts) == 0 {
		return nil, terr.New(terr.Validation, "script: no statement found; write %s", statementWords)
	}
	return stmts, nil
}

// stmtParser recognises one statement's prefix from its scanner tokens
// (comments already removed).
type stmtParser struct {
	script string
	toks   []*pg_query.ScanToken
	end    int // byte offset where the statement ends (its ';' or the script's end)
	i      int // current token
	label  string
}

func (p *stmtParser) parse() (Statement, error) {
	switch p.word(0) {
	case "create":
		return p.parseCreate()
	case "pause", "resume":
		kind := PauseTransform
		if p.word(0) == "resume" {
			kind = ResumeTransform
		}
		verb := strings.ToUpper(p.word(0))
		p.i++
		if err := p.expect("transform", verb, ""); err != nil {
			return Statement{}, err
		}
		st := Statement{Kind: kind}
		if p.word(0) == "all" {
			if kind == PauseTransform {
				return Statement{}, p.errHere("PAUSE TRANSFORM ALL is not supported; pause each transform by name (RESUME TRANSFORM ALL resumes every transform the system paused)")
			}
			p.i++
			st.All, p.label = true, "RESUME TRANSFORM ALL"
			if p.i < len(p.toks) {
				return Statement{}, p.errHere("unexpected %s after RESUME TRANSFORM ALL; end the statement with ';'", p.found())
			}
			return st, nil
		}
		if err := p.name(&st); err != nil {
			return Statement{}, err
		}
		return st, p.expectEnd()
	case "drop":
		p.i++
		if err := p.expect("transform", "DROP", ""); err != nil {
			return Statement{}, err
		}
		st := Statement{Kind: DropTransform}
		if p.word(0) == "if" && p.word(1) == "exists" {
			p.i += 2
			st.IfExists = true
		}
		if err := p.name(&st); err != nil {
			return Statement{}, err
		}
		return st, p.expectEnd()
	case "alter":
		return p.parseAlter()
	case "request":
		p.i++
		if err := p.expect("backfill", "REQUEST", "; write REQUEST BACKFILL OF table"); err != nil {
			return Statement{}, err
		}
		if err := p.expect("of", "REQUEST BACKFILL", "; write REQUEST BACKFILL OF table"); err != nil {
			return Statement{}, err
		}
		st := Statement{Kind: RequestBackfill}
		if err := p.qualified(&st.Schema, &st.Name, "a table name"); err != nil {
			return Statement{}, err
		}
		p.label = fmt.Sprintf("table %q", qualifiedLabel(st.Schema, st.Name))
		if p.i < len(p.toks) {
			return Statement{}, p.errHere("unexpected %s after the table name; end the statement with ';'", p.found())
		}
		return st, nil
	default:
		return Statement{}, p.errHere("expected %s, found %s", statementWords, p.found())
	}
}

// statementWords are the statements a script may hold, for the error
// naming what was expected.
const statementWords = "CREATE TRANSFORM, ALTER TRANSFORM, PAUSE TRANSFORM, RESUME TRANSFORM, DROP TRANSFORM or REQUEST BACKFILL"

// qualifiedLabel is [schema.]name as an error names it.
func qualifiedLabel(schema, name string) string {
	if schema != "" {
		return schema + "." + name
	}
	return name
}

func (p *stmtParser) parseCreate() (Statement, error) {
	p.i++
	orReplace := false
	if p.word(0) == "or" {
		p.i++
		if err := p.expect("replace", "CREATE OR", ""); err != nil {
			return Statement{}, err
		}
		orReplace = true
	}
	if err := p.expect("transform", "CREATE", "; this language defines only transforms"); err != nil {
		return Statement{}, err
	}
	st := Statement{Kind: CreateTransform}
	if p.word(0) == "if" && p.word(1) == "not" {
		p.i += 2
		if err := p.expect("exists", "IF NOT", ""); err != nil {
			return Statement{}, err
		}
		st.IfNotExists = true
	}
	if err := p.name(&st); err != nil {
		return Statement{}, err
	}
	if orReplace && st.IfNotExists {
		return Statement{}, terr.New(terr.Validation, "%s: CREATE OR REPLACE and IF NOT EXISTS contradict each other; write one of them", p.label)
	}
	st.OrReplace = orReplace
	if p.word(0) == "without" {
		p.i++
		if err := p.expect("source", "WITHOUT", "; write WITHOUT SOURCE INDEX"); err != nil {
			return Statement{}, err
		}
		if err := p.expect("index", "WITHOUT SOURCE", "; write WITHOUT SOURCE INDEX"); err != nil {
			return Statement{}, err
		}
		st.WithoutSourceIndex = true
	}
	if err := p.expect("as", "the transform name", "; write CREATE TRANSFORM name AS SELECT …"); err != nil {
		return Statement{}, err
	}
	if p.i >= len(p.toks) {
		return Statement{}, p.errHere("expected a SELECT after AS, found the end of the statement")
	}
	q, err := parseSelect(p.label, p.script, int(p.toks[p.i].Start), p.end, false)
	if err != nil {
		return Statement{}, err
	}
	st.Query = q
	return st, nil
}

// word returns the lower-cased text of the token k places ahead when it is
// an unquoted word (identifier or keyword), else "".
func (p *stmtParser) word(k int) string {
	if p.i+k >= len(p.toks) {
		return ""
	}
	t := p.toks[p.i+k]
	text := p.text(t)
	if t.KeywordKind == pg_query.KeywordKind_NO_KEYWORD && (t.Token != pg_query.Token_IDENT || strings.HasPrefix(text, `"`)) {
		return ""
	}
	return lowerASCII(text)
}

func (p *stmtParser) text(t *pg_query.ScanToken) string { return p.script[t.Start:t.End] }

// found describes the current token for an error sentence.
func (p *stmtParser) found() string {
	if p.i >= len(p.toks) {
		return "the end of the statement"
	}
	text := p.text(p.toks[p.i])
	if len(text) > 40 {
		text = text[:40] + "…"
	}
	return fmt.Sprintf("%q", text)
}

func (p *stmtParser) offset() int {
	if p.i >= len(p.toks) {
		return p.end
	}
	return int(p.toks[p.i].Start)
}

// errHere builds a validation error positioned at the current token.
func (p *stmtParser) errHere(format string, args ...any) error {
	return terr.New(terr.Validation, "%s: %s (%s)", p.label, fmt.Sprintf(format, args...), position(p.script, p.offset()))
}

// expect consumes the word w; the error names what came before it and
// ends with hint.
func (p *stmtParser) expect(w, after, hint string) error {
	if p.word(0) != w {
		return terr.New(terr.Validation, "%s: expected %s after %s, found %s (%s)%s", p.label, strings.ToUpper(w), after, p.found(), position(p.script, p.offset()), hint)
	}
	p.i++
	return nil
}

func (p *stmtParser) expectEnd() error {
	if p.i < len(p.toks) {
		return p.errHere("unexpected %s after the transform name; end the statement with ';'", p.found())
	}
	return nil
}

// name parses a transform's `[schema.]name` into st and sets the error
// label.
func (p *stmtParser) name(st *Statement) error {
	if err := p.qualified(&st.Schema, &st.Name, "a transform name"); err != nil {
		return err
	}
	p.label = fmt.Sprintf("transform %q", qualifiedLabel(st.Schema, st.Name))
	if strings.HasPrefix(st.Name, reservedPrefix) {
		return terr.New(terr.Validation, "%s: names beginning with %q are reserved for trellis's hidden columns and tables; choose another name", p.label, reservedPrefix)
	}
	return nil
}

// qualified parses `[schema.]name` into schema and name; what names what
// is expected ("a transform name").
func (p *stmtParser) qualified(schema, name *string, what string) error {
	first, err := p.ident(what)
	if err != nil {
		return err
	}
	if p.i < len(p.toks) && p.toks[p.i].Token == pg_query.Token_ASCII_46 {
		p.i++
		second, err := p.ident(what)
		if err != nil {
			return err
		}
		if p.i < len(p.toks) && p.toks[p.i].Token == pg_query.Token_ASCII_46 {
			return p.errHere("%s has at most two parts (schema.name)", what)
		}
		*schema, *name = first, second
		return nil
	}
	*name = first
	return nil
}

// ident decodes one SQL identifier token: unquoted names fold to lower
// case, double-quoted names are kept exactly.
func (p *stmtParser) ident(what string) (string, error) {
	if p.i >= len(p.toks) {
		return "", p.errHere("expected %s, found the end of the statement", what)
	}
	t := p.toks[p.i]
	text := p.text(t)
	var name string
	switch {
	case t.Token == pg_query.Token_UIDENT:
		return "", p.errHere("Unicode-escaped names (U&\"…\") are not supported; write the name plainly or in double quotes")
	case t.Token == pg_query.Token_IDENT && strings.HasPrefix(text, `"`):
		if len(text) < 2 || !strings.HasSuffix(text, `"`) {
			return "", p.errHere("malformed quoted name %s", p.found())
		}
		name = strings.ReplaceAll(text[1:len(text)-1], `""`, `"`)
	case t.Token == pg_query.Token_IDENT,
		t.KeywordKind == pg_query.KeywordKind_UNRESERVED_KEYWORD,
		t.KeywordKind == pg_query.KeywordKind_COL_NAME_KEYWORD:
		name = lowerASCII(text)
	case t.KeywordKind != pg_query.KeywordKind_NO_KEYWORD:
		return "", p.errHere("%q is a reserved word and cannot be a name unquoted; double-quote it or choose another name", text)
	default:
		return "", p.errHere("expected %s, found %s", what, p.found())
	}
	if name == "" {
		return "", p.errHere("a name cannot be empty")
	}
	if len(name) > maxIdentLen {
		return "", p.errHere("name %q is %d bytes long; PostgreSQL names are limited to %d bytes, choose a shorter one", name, len(name), maxIdentLen)
	}
	p.i++
	return name, nil
}

// position renders a byte offset of script as "line L, column C" (1-based;
// columns count characters).
func position(script string, off int) string {
	if off < 0 {
		off = 0
	}
	if off > len(script) {
		off = len(script)
	}
	line := 1 + strings.Count(script[:off], "\n")
	lineStart := strings.LastIndexByte(script[:off], '\n') + 1
	return fmt.Sprintf("line %d, column %d", line, utf8.RuneCountInString(script[lineStart:off])+1)
}

// pgError turns a pg_query scanner or parser error on src (which starts at
// byte base of script) into a validation error with PostgreSQL's message and
// the position in the script.
func pgError(label, script string, base int, src string, err error) error {
	var pe *parser.Error
	if !errors.As(err, &pe) {
		return terr.Wrap(terr.Internal, err, "%s: the SQL parser failed: %v", label, err)
	}
	msg := pe.Message
	if pe.Cursorpos > 0 {
		// Cursorpos counts characters from 1.
		off, n := 0, pe.Cursorpos-1
		for n > 0 && off < len(src) {
			_, size := utf8.DecodeRuneInString(src[off:])
			off += size
			n--
		}
		msg += " (" + position(script, base+off) + ")"
	}
	return terr.Wrap(terr.Validation, err, "%s: %s", label, msg)
}
