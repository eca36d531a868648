package engine

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"github.com/pganalyze/pg_query_go/v5/parser"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer names would be silently
// truncated by the server, so they are refused instead.
const maxIdentLen = 63

// reservedPrefix starts the names of trellis's hidden target columns.
const reservedPrefix = "__"

// supportedAggs are the aggregates this version can maintain.
var supportedAggs = map[string]bool{"count": true, "sum": true, "avg": true, "min": true, "max": true,
	"bool_and": true, "bool_or": true, "every": true, "bit_and": true, "bit_or": true, "bit_xor": true,
	"string_agg": true, "array_agg": true, "jsonb_agg": true, "jsonb_object_agg": true}

// orderedAggs build their result in the order rows arrive: without ORDER
// BY inside the call, PostgreSQL itself gives no defined result.
var orderedAggs = map[string]bool{"string_agg": true, "array_agg": true, "jsonb_agg": true}

// knownAggs are PostgreSQL's other built-in aggregates: recognised so that
// they are refused as "not supported yet" rather than treated as plain
// functions.
var knownAggs = map[string]bool{
	"array_agg": true, "bit_and": true, "bit_or": true, "bit_xor": true, "bool_and": true,
	"bool_or": true, "every": true, "json_agg": true, "json_agg_strict": true,
	"jsonb_agg": true, "jsonb_agg_strict": true, "json_object_agg": true,
	"json_object_agg_strict": true, "json_object_agg_unique": true,
	"json_object_agg_unique_strict": true, "jsonb_object_agg": true,
	"jsonb_object_agg_strict": true, "jsonb_object_agg_unique": true,
	"jsonb_object_agg_unique_strict": true, "range_agg": true,
	"range_intersect_agg": true, "string_agg": true, "xmlagg": true, "any_value": true,
	"corr": true, "covar_pop": true, "covar_samp": true, "regr_avgx": true,
	"regr_avgy": true, "regr_count": true, "regr_intercept": true, "regr_r2": true,
	"regr_slope": true, "regr_sxx": true, "regr_sxy": true, "regr_syy": true,
	"stddev": true, "stddev_pop": true, "stddev_samp": true, "variance": true,
	"var_pop": true, "var_samp": true, "mode": true, "percentile_cont": true,
	"percentile_disc": true,
}

// windowOnlyFuncs are built-in functions that only work as window functions.
var windowOnlyFuncs = map[string]bool{
	"row_number": true, "rank": true, "dense_rank": true, "percent_rank": true,
	"cume_dist": true, "ntile": true, "lag": true, "lead": true, "first_value": true,
	"last_value": true, "nth_value": true,
}

// volatileFuncs is a deny-list of well-known volatile or stable built-ins,
// caught here for an early, clear error. The complete check runs later
// against pg_proc.provolatile, where the catalog is known.
var volatileFuncs = map[string]bool{
	"now": true, "random": true, "clock_timestamp": true, "statement_timestamp": true,
	"transaction_timestamp": true, "timeofday": true, "nextval": true, "currval": true,
	"setval": true, "lastval": true, "setseed": true, "gen_random_uuid": true,
	"txid_current": true, "pg_current_xact_id": true, "current_setting": true,
	"set_config": true,
}

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
		return nil, terr.New(terr.Validation, "script: no statement found; write CREATE TRANSFORM, PAUSE TRANSFORM, RESUME TRANSFORM or DROP TRANSFORM")
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
	default:
		return Statement{}, p.errHere("expected CREATE TRANSFORM, PAUSE TRANSFORM, RESUME TRANSFORM or DROP TRANSFORM, found %s", p.found())
	}
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
	q, err := parseSelect(p.label, p.script, int(p.toks[p.i].Start), p.end)
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

// name parses `[schema.]name` into st and sets the error label.
func (p *stmtParser) name(st *Statement) error {
	first, err := p.ident()
	if err != nil {
		return err
	}
	if p.i < len(p.toks) && p.toks[p.i].Token == pg_query.Token_ASCII_46 {
		p.i++
		second, err := p.ident()
		if err != nil {
			return err
		}
		if p.i < len(p.toks) && p.toks[p.i].Token == pg_query.Token_ASCII_46 {
			return p.errHere("a transform name has at most two parts (schema.name)")
		}
		st.Schema, st.Name = first, second
	} else {
		st.Name = first
	}
	label := st.Name
	if st.Schema != "" {
		label = st.Schema + "." + st.Name
	}
	p.label = fmt.Sprintf("transform %q", label)
	if strings.HasPrefix(st.Name, reservedPrefix) {
		return terr.New(terr.Validation, "%s: names beginning with %q are reserved for trellis's hidden columns and tables; choose another name", p.label, reservedPrefix)
	}
	return nil
}

// ident decodes one SQL identifier token: unquoted names fold to lower
// case, double-quoted names are kept exactly.
func (p *stmtParser) ident() (string, error) {
	if p.i >= len(p.toks) {
		return "", p.errHere("expected a transform name, found the end of the statement")
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
		return "", p.errHere("expected a transform name, found %s", p.found())
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

// lowerASCII folds A-Z only, as PostgreSQL does for unquoted identifiers
// in multi-byte encodings.
func lowerASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
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

// selectChecker validates one transform's SELECT against the supported
// subset. Node locations are byte offsets into the SELECT's text, which
// starts at byte base of script.
type selectChecker struct {
	label  string
	script string
	base   int
	tables []TableRef
	outer  []OuterJoin
	cover  []int
	// groupKeys are the GROUP BY expressions' comparison keys.
	groupKeys []string
	// equalities are the column equalities of WHERE and the joins.
	equalities []Equality
	// joinConds are the joins' ON conditions, deparsed.
	joinConds []string
	// levels are the derived tables kept as inner levels (ADR 0018); rvs
	// the parsed table of each entry of tables, to find the placeholders.
	levels []*Level
	rvs    []*pg_query.RangeVar
	// unread are the computed outputs of flattened derived tables that
	// the outer query never reads (unreadOutput).
	unread []Unread
	// fromRefused: a FROM item was refused, so tables lists only part of
	// FROM and a qualifier it lacks may name a table it never reached —
	// not a mistake of its own to report.
	fromRefused bool
}

// single: the query reads one table, so an unqualified column and one
// qualified by the table's name are the same column.
func (c *selectChecker) single() bool { return len(c.tables) == 1 }

// refNames are the names FROM tables are referred to by.
func (c *selectChecker) refNames() []string {
	out := make([]string, len(c.tables))
	for i, t := range c.tables {
		out[i] = t.RefName()
	}
	return out
}

// errf builds a validation error; loc < 0 means no position is known.
func (c *selectChecker) errf(loc int32, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if loc >= 0 {
		msg += " (" + position(c.script, c.base+int(loc)) + ")"
	}
	return terr.New(terr.Validation, "%s: %s", c.label, msg)
}

// selectItem is a select-list entry while the query is being validated.
type selectItem struct {
	t        Target
	composed bool           // an expression over aggregates (Target.Composed)
	grouped  bool           // composed of GROUP BY expressions only, no aggregate
	node     *pg_query.Node // the expression
	key      string         // comparison key (see compareKey)
	loc      int32
}

func parseSelect(label, script string, base, end int) (*Query, error) {
	src := script[base:end]
	tree, err := pg_query.Parse(src)
	if err != nil {
		return nil, pgError(label, script, base, src, err)
	}
	c := &selectChecker{label: label, script: script, base: base}
	if len(tree.Stmts) != 1 {
		return nil, c.errf(0, "expected a single SELECT after AS")
	}
	sel := tree.Stmts[0].GetStmt().GetSelectStmt()
	if sel == nil {
		return nil, c.errf(0, "the query after AS must be a SELECT")
	}
	// The definition as written is what the catalog shows; the rewrites
	// below only change how it is kept.
	original, err := pg_query.Deparse(tree)
	if err != nil {
		return nil, terr.Wrap(terr.Internal, err, "%s: deparse the query: %v", label, err)
	}
	if selectsStar(sel) {
		// * and t.* name the columns the tables have when the definition
		// is applied: PostgreSQL expands them (ExpandStar) and the expanded
		// query is validated then. Its clauses are checked now (a plain
		// DISTINCT is rewritten after the expansion).
		distinct := sel.DistinctClause
		if len(distinct) == 1 && distinct[0].GetNode() == nil {
			sel.DistinctClause = nil
		}
		err := c.checkClauses(sel)
		sel.DistinctClause = distinct
		if err != nil {
			return nil, err
		}
		return &Query{SQL: original, Star: true}, nil
	}
	// Every unsupported part is found before refusing, so one error names
	// them all; checks that depend on an earlier part only run when it
	// passed.
	var errs []error
	keep := func(err error) bool {
		errs = append(errs, err)
		return err == nil
	}
	if err := c.distinctAsGroupBy(sel); err != nil {
		return nil, err
	}
	if !keep(c.checkClauses(sel)) && (len(sel.FromClause) == 0 || sel.Larg != nil) {
		return nil, joinRefusals(errs)
	}
	fromOK := keep(c.flattenDerived(sel)) && keep(c.checkFrom(sel))
	c.fromRefused = !fromOK
	q := &Query{Tables: c.tables, Outer: c.outer, Cover: c.cover, from: sel.FromClause, OrderBy: len(sel.SortClause) > 0, Equalities: c.equalities, joinConds: c.joinConds, unread: c.unread, tree: tree}
	for _, l := range c.levels {
		for i, rv := range c.rvs {
			if rv == l.rv {
				l.Table = i
				q.Levels = append(q.Levels, l)
			}
		}
	}
	if sel.WhereClause != nil {
		if keep(c.checkExpr(sel.WhereClause, "WHERE", "aggregate functions are not allowed in WHERE (%s); WHERE filters source rows before grouping, remove the aggregate")) {
			if q.Where, err = c.deparse(sel.WhereClause, "WHERE"); err != nil {
				return nil, err
			}
		}
	}
	items, err := c.selectList(sel)
	if keep(err) && fromOK && joinRefusals(errs) == nil {
		if keep(c.groupBy(sel, items, q)) && q.Aggregate {
			keep(c.composedItems(sel, items, c.groupKeys, q))
		}
	}
	if err := joinRefusals(errs); err != nil {
		return nil, err
	}
	for _, it := range items {
		q.Targets = append(q.Targets, it.t)
	}
	for _, cn := range columnNames(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}) {
		q.columns = append(q.columns, cn.Column)
	}
	q.SQL = original
	if q.Rewritten, err = pg_query.Deparse(tree); err != nil {
		return nil, terr.Wrap(terr.Internal, err, "%s: deparse the query: %v", label, err)
	}
	return q, nil
}

// checkClauses refuses the statement-level clauses outside the subset.
func (c *selectChecker) checkClauses(sel *pg_query.SelectStmt) error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if sel.WithClause != nil {
		add(c.withRefusal(sel.WithClause))
	}
	if sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED {
		op := strings.TrimPrefix(sel.Op.String(), "SETOP_")
		add(c.errf(-1, "%s is not supported in a transform; define one transform per branch", op))
	}
	if len(sel.ValuesLists) > 0 {
		add(c.errf(-1, "VALUES is not supported in a transform; a transform reads a source table (put constant rows in a table)"))
	}
	if sel.IntoClause != nil {
		add(c.errf(-1, "SELECT INTO is not supported in a transform; remove INTO (the transform's name is its target table)"))
	}
	if len(sel.DistinctClause) > 0 {
		if len(sel.DistinctClause) == 1 && sel.DistinctClause[0].GetNode() == nil {
			add(c.errf(-1, "DISTINCT is not supported yet; GROUP BY the selected expressions instead"))
		} else {
			add(c.errf(-1, "DISTINCT ON is not supported in a transform; remove it (which row it keeps depends on row order)"))
		}
	}
	if sel.LimitCount != nil || sel.LimitOffset != nil {
		loc := int32(-1)
		if sel.LimitCount != nil {
			loc = nodeLocation(sel.LimitCount)
		} else {
			loc = nodeLocation(sel.LimitOffset)
		}
		add(c.errf(loc, "LIMIT, OFFSET and FETCH are not supported in a transform; remove them (the target holds every row of the query, limit rows when you read it)"))
	}
	if len(sel.LockingClause) > 0 {
		add(c.errf(-1, "FOR UPDATE/FOR SHARE is not supported in a transform; remove it (source rows are read without locking them)"))
	}
	if len(sel.WindowClause) > 0 {
		add(c.errf(-1, "WINDOW (window functions) is not supported in a transform; remove the WINDOW clause"))
	}
	if sel.GroupDistinct {
		add(c.errf(-1, "GROUP BY DISTINCT is not supported in a transform; remove DISTINCT"))
	}
	return joinRefusals(errs)
}

// withRefusal refuses a WITH clause with the advice that fits it: each
// piece of advice is a query the engine accepts (testdata/definitions.sql
// holds one of each).
func (c *selectChecker) withRefusal(w *pg_query.WithClause) error {
	var names []string
	for _, n := range w.Ctes {
		cte := n.GetCommonTableExpr()
		if cte == nil {
			continue
		}
		names = append(names, quoteIdents([]string{cte.Ctename}))
		if cte.Ctequery.GetSelectStmt() == nil {
			return c.errf(cte.Location, "WITH %s holds a data-modifying statement (INSERT, UPDATE, DELETE or MERGE); a transform's query only reads, so remove it", quoteIdents([]string{cte.Ctename}))
		}
	}
	if w.Recursive {
		return c.errf(w.Location, "WITH RECURSIVE is not supported in a transform; a recursive query has no incremental form here — keep it as a view or a materialized view")
	}
	list := strings.Join(names, ", ")
	return c.errf(w.Location, "WITH (common table expressions) is not supported yet; where the query reads %s in FROM, write the subquery there in its place (FROM (SELECT …) AS name), or define it as a transform of its own and read its target", list)
}

// subLinkAdvice says how to write a subquery in an expression with a
// subquery in FROM instead, by kind; each rewrite it suggests is accepted
// (testdata/definitions.sql holds one of each).
func subLinkAdvice(x *pg_query.SubLink) string {
	switch x.SubLinkType {
	case pg_query.SubLinkType_EXISTS_SUBLINK:
		return "for EXISTS, join the subquery's distinct rows instead: … JOIN (SELECT DISTINCT <the columns it correlates on> FROM … WHERE <its other conditions>) AS e ON e.<column> = <outer column>; for NOT EXISTS, LEFT JOIN it and add WHERE e.<column> IS NULL"
	case pg_query.SubLinkType_ANY_SUBLINK:
		if isEqualsOp(x.OperName) {
			return "for IN, join the subquery's distinct values instead: … JOIN (SELECT DISTINCT <its column> AS v FROM …) AS s ON s.v = <the outer expression>; for NOT IN where neither side is ever NULL, LEFT JOIN it and add WHERE s.v IS NULL"
		}
	case pg_query.SubLinkType_EXPR_SUBLINK:
		return "compute a scalar subquery in a subquery in FROM and join that: LEFT JOIN (SELECT <correlated column>, max(…) AS m FROM … GROUP BY <correlated column>) AS s ON s.<correlated column> = <outer column> when it refers to the outer query (a count becomes coalesce(s.m, 0)), CROSS JOIN (SELECT avg(…) AS m FROM …) AS s when it does not; then use s.m"
	case pg_query.SubLinkType_ARRAY_SUBLINK:
		return "for ARRAY (subquery), LEFT JOIN (SELECT <correlated column>, array_agg(… ORDER BY …) AS a FROM … GROUP BY <correlated column>) AS s ON s.<correlated column> = <outer column> and use s.a"
	}
	return "join the subquery's tables in FROM and move its conditions into WHERE where the query allows it"
}

// isEqualsOp: an operator name list is plain "=" (IN is = ANY).
func isEqualsOp(names []*pg_query.Node) bool {
	return len(names) == 0 || lastElemString(names) == "="
}

// refusals is one definition's refusal that names several unsupported
// parts: the user fixes them all at once, not one per attempt.
type refusals struct {
	combined *terr.Error
	parts    []*terr.Error
}

// Error is the combined sentence.
func (r *refusals) Error() string { return r.combined.Error() }

// Unwrap exposes the combined *terr.Error (its code is validation).
func (r *refusals) Unwrap() error { return r.combined }

// joinRefusals combines the refusals of one query: nil for none, the one
// itself, or one error listing every part (nested lists flattened).
func joinRefusals(errs []error) error {
	var parts []*terr.Error
	var other error
	for _, err := range errs {
		var r *refusals
		var te *terr.Error
		switch {
		case err == nil:
		case errors.As(err, &r):
			parts = append(parts, r.parts...)
		case errors.As(err, &te) && te.Code == terr.Validation:
			parts = append(parts, te)
		case other == nil:
			other = err
		}
	}
	switch {
	case other != nil:
		return other
	case len(parts) == 0:
		return nil
	case len(parts) == 1:
		return parts[0]
	}
	label, _, _ := strings.Cut(parts[0].Msg, ": ")
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the query has %d unsupported parts: ", label, len(parts))
	for i, p := range parts {
		if i > 0 {
			b.WriteString("; ")
		}
		_, msg, _ := strings.Cut(p.Msg, ": ")
		fmt.Fprintf(&b, "(%d) %s", i+1, msg)
	}
	return &refusals{combined: terr.New(terr.Validation, "%s", b.String()), parts: parts}
}

// checkFrom accepts a FROM clause of plain tables joined by comma, CROSS,
// INNER, LEFT, RIGHT or FULL joins (ON, USING or NATURAL), and records the
// tables, the outer joins and the cover in c (ADR 0010).
func (c *selectChecker) checkFrom(sel *pg_query.SelectStmt) error {
	if len(sel.FromClause) == 0 {
		return c.errf(-1, "FROM: a transform reads source tables; add FROM <table>")
	}
	var where []ColumnName
	if sel.WhereClause != nil {
		where = columnNames(sel.WhereClause)
		c.equalities = append(c.equalities, equalities(sel.WhereClause, nil, nil)...)
	}
	var cover []int
	for i, item := range sel.FromClause {
		cv, err := c.fromItem(item, where)
		if err != nil {
			return err
		}
		if i == 0 {
			cover = cv
		}
	}
	c.cover = cover
	return nil
}

// fromItem validates one FROM item and returns its cover: the tables under
// it that are present in every row it produces. above are the column
// references of the conditions applied to its rows later.
func (c *selectChecker) fromItem(item *pg_query.Node, above []ColumnName) ([]int, error) {
	switch n := item.Node.(type) {
	case *pg_query.Node_RangeVar:
		rv := n.RangeVar
		switch {
		case rv.Catalogname != "":
			return nil, c.errf(rv.Location, "FROM: a three-part table name (database.schema.table) is not supported; write schema.table")
		case rv.Alias != nil && len(rv.Alias.Colnames) > 0:
			return nil, c.errf(rv.Location, "FROM: column aliases on the table (%s(…)) are not supported; rename columns with AS in the select list", rv.Alias.Aliasname)
		}
		t := TableRef{Schema: rv.Schemaname, Name: rv.Relname, Only: !rv.Inh}
		if rv.Alias != nil {
			t.Alias = rv.Alias.Aliasname
		}
		for _, o := range c.tables {
			if o.RefName() == t.RefName() {
				return nil, c.errf(rv.Location, "FROM: the name %s is used by two FROM items; give one of them an alias (FROM %s AS x)", quoteIdents([]string{t.RefName()}), quoteIdents([]string{t.Name}))
			}
		}
		c.tables = append(c.tables, t)
		c.rvs = append(c.rvs, rv)
		return []int{len(c.tables) - 1}, nil
	case *pg_query.Node_JoinExpr:
		j := n.JoinExpr
		if j.Alias != nil {
			return nil, c.errf(-1, "FROM: an alias on a join (… JOIN …) AS %s hides the names of its tables; remove the alias and refer to the tables by their own names", j.Alias.Aliasname)
		}
		// This join's own condition filters the rows of a side it does not
		// preserve.
		var cond []ColumnName
		if j.Quals != nil {
			cond = columnNames(j.Quals)
		}
		for _, u := range j.UsingClause {
			if s := u.GetString_(); s != nil {
				cond = append(cond, ColumnName{Column: s.Sval})
			}
		}
		if j.IsNatural {
			cond = append(cond, ColumnName{Column: "*"})
		}
		leftAbove, rightAbove := above, above
		if j.Jointype == pg_query.JoinType_JOIN_INNER || j.Jointype == pg_query.JoinType_JOIN_RIGHT {
			leftAbove = append(append([]ColumnName{}, above...), cond...)
		}
		if j.Jointype == pg_query.JoinType_JOIN_INNER || j.Jointype == pg_query.JoinType_JOIN_LEFT {
			rightAbove = append(append([]ColumnName{}, above...), cond...)
		}
		first := len(c.tables)
		left, err := c.fromItem(j.Larg, leftAbove)
		if err != nil {
			return nil, err
		}
		mid := len(c.tables)
		right, err := c.fromItem(j.Rarg, rightAbove)
		if err != nil {
			return nil, err
		}
		lspan, rspan := spanOf(first, mid), spanOf(mid, len(c.tables))
		if j.Quals != nil {
			if text, err := c.deparse(j.Quals, "JOIN … ON"); err == nil {
				c.joinConds = append(c.joinConds, text)
			}
			// Either side of an ON equality may name any table under the join.
			all := spanOf(first, len(c.tables))
			c.equalities = append(c.equalities, equalities(j.Quals, all, all)...)
		}
		for _, u := range j.UsingClause {
			if s := u.GetString_(); s != nil {
				c.equalities = append(c.equalities, Equality{Left: ColumnName{Column: s.Sval}, Right: ColumnName{Column: s.Sval}, LeftIn: lspan, RightIn: rspan})
			}
		}
		if j.Quals != nil {
			if err := c.checkExpr(j.Quals, "JOIN … ON", "aggregate functions are not allowed in JOIN conditions (%s); remove the aggregate"); err != nil {
				return nil, err
			}
		}
		switch j.Jointype {
		case pg_query.JoinType_JOIN_INNER:
			return left, nil
		case pg_query.JoinType_JOIN_LEFT:
			c.outer = append(c.outer, OuterJoin{Kind: "left", Left: lspan, Right: rspan, Above: above, First: first, InnerCover: left, node: j})
			return left, nil
		case pg_query.JoinType_JOIN_RIGHT:
			c.outer = append(c.outer, OuterJoin{Kind: "right", Left: lspan, Right: rspan, Above: above, First: first, InnerCover: left, node: j})
			return right, nil
		case pg_query.JoinType_JOIN_FULL:
			c.outer = append(c.outer, OuterJoin{Kind: "full", Left: lspan, Right: rspan, Above: above, First: first, InnerCover: left, node: j})
			return append(append([]int{}, left...), right...), nil
		default:
			return nil, c.errf(-1, "FROM: this kind of join is not supported; write INNER, LEFT, RIGHT, FULL or CROSS JOIN")
		}
	case *pg_query.Node_RangeSubselect:
		if n.RangeSubselect.Lateral {
			return nil, c.errf(-1, "FROM: LATERAL subqueries are not supported in a transform; join the subquery's tables in the outer FROM and put its conditions in WHERE")
		}
		return nil, c.errf(-1, "FROM: subqueries in FROM are not supported yet; join the subquery's tables in the outer FROM and move its conditions into WHERE")
	case *pg_query.Node_RangeFunction:
		return nil, c.errf(-1, "FROM: functions in FROM are not supported; select from tables")
	case *pg_query.Node_RangeTableSample:
		return nil, c.errf(n.RangeTableSample.Location, "FROM: TABLESAMPLE is not supported in a transform; remove it (a transform covers every row)")
	default:
		return nil, c.errf(-1, "FROM: only tables and joins of tables are supported; select from tables")
	}
}

// spanOf lists the table indexes a, …, b-1.
func spanOf(a, b int) []int {
	out := make([]int, 0, b-a)
	for i := a; i < b; i++ {
		out = append(out, i)
	}
	return out
}

// equalities lists the conjuncts of a condition that equate two plain
// columns: the joins the re-derive probes through indexes. left and right
// (nil for WHERE) are the tables each side may name.
func equalities(n *pg_query.Node, left, right []int) []Equality {
	if be := n.GetBoolExpr(); be != nil && be.Boolop == pg_query.BoolExprType_AND_EXPR {
		var out []Equality
		for _, a := range be.Args {
			out = append(out, equalities(a, left, right)...)
		}
		return out
	}
	ae := n.GetAExpr()
	if ae == nil || ae.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(ae.Name) != 1 || ae.Name[0].GetString_().GetSval() != "=" ||
		ae.Lexpr == nil || ae.Rexpr == nil {
		return nil
	}
	l, r := columnNames(ae.Lexpr), columnNames(ae.Rexpr)
	if len(l) != 1 || len(r) != 1 || ae.Lexpr.GetColumnRef() == nil || ae.Rexpr.GetColumnRef() == nil {
		return nil
	}
	return []Equality{{Left: l[0], Right: r[0], LeftIn: left, RightIn: right}}
}

// columnNames lists the column references in an expression.
func columnNames(n *pg_query.Node) []ColumnName {
	var out []ColumnName
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		cr, ok := m.(*pg_query.ColumnRef)
		if !ok {
			return true
		}
		var parts []string
		for _, f := range cr.Fields {
			if s := f.GetString_(); s != nil {
				parts = append(parts, s.Sval)
			} else {
				parts = append(parts, "*")
			}
		}
		switch len(parts) {
		case 1:
			out = append(out, ColumnName{Column: parts[0]})
		case 2:
			out = append(out, ColumnName{Ref: parts[0], Column: parts[1]})
		}
		return false
	})
	return out
}

// FromSQL renders the FROM clause (without the keyword) with each table's
// schema replaced by schemas[i] (by Tables index), so generated SQL names
// exactly the tables resolved at define time.
func (q *Query) FromSQL(schemas []string) (string, error) {
	return renderFrom(q.from, schemas, 0)
}

// InnerSQL renders an outer join of the query as an inner join of its two
// sides (the same ON or USING): the matches the join makes, which a
// mirror keeps (ADR 0010).
func (q *Query) InnerSQL(oj OuterJoin, schemas []string) (string, error) {
	if oj.node == nil {
		return "", errors.New("render inner join: the join's parse tree is not kept")
	}
	j := proto.Clone(oj.node).(*pg_query.JoinExpr)
	j.Jointype = pg_query.JoinType_JOIN_INNER
	return renderFrom([]*pg_query.Node{{Node: &pg_query.Node_JoinExpr{JoinExpr: j}}}, schemas, oj.First)
}

// renderFrom deparses FROM items whose tables are schemas[first:] in order.
func renderFrom(from []*pg_query.Node, schemas []string, first int) (string, error) {
	items := make([]*pg_query.Node, len(from))
	i := first
	for k, it := range from {
		items[k] = proto.Clone(it).(*pg_query.Node)
		walk(items[k].ProtoReflect(), func(m proto.Message) bool {
			if rv, ok := m.(*pg_query.RangeVar); ok {
				if i < len(schemas) {
					rv.Schemaname = schemas[i]
				}
				i++
				return false
			}
			return true
		})
	}
	out, err := deparseSelect(&pg_query.SelectStmt{FromClause: items})
	if err != nil {
		return "", fmt.Errorf("deparse FROM: %w", err)
	}
	sql, ok := strings.CutPrefix(out, "SELECT FROM ")
	if !ok {
		return "", fmt.Errorf("deparse FROM: unexpected deparser output %q", out)
	}
	return sql, nil
}

// selectList validates the select items and works out their names.
func (c *selectChecker) selectList(sel *pg_query.SelectStmt) ([]*selectItem, error) {
	if len(sel.TargetList) == 0 {
		return nil, c.errf(-1, "the select list is empty; select at least one expression")
	}
	var items []*selectItem
	var errs []error
	seen := map[string]int{}
	for i, n := range sel.TargetList {
		it, err := c.selectItem(i, n, seen)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		items = append(items, it)
	}
	return items, joinRefusals(errs)
}

// selectItem validates select item i and works out its name; seen maps
// the names of the items before it to their 1-based positions.
func (c *selectChecker) selectItem(i int, n *pg_query.Node, seen map[string]int) (*selectItem, error) {
	rt := n.GetResTarget()
	if rt == nil || rt.Val == nil {
		return nil, c.errf(-1, "select list item %d: unexpected entry", i+1)
	}
	if cr := rt.Val.GetColumnRef(); cr != nil && hasStar(cr) {
		return nil, c.errf(rt.Location, "select list item %d: * could not be expanded; list the columns you need by name", i+1)
	}
	clause := fmt.Sprintf("select list item %d", i+1)
	expr, err := deparseExpr(rt.Val)
	if err != nil {
		return nil, terr.Wrap(terr.Validation, err, "%s: %s: this expression cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", c.label, clause, err)
	}
	clause = fmt.Sprintf("select list item %d (%s)", i+1, expr)
	it := &selectItem{node: rt.Val, loc: rt.Location, t: Target{Expr: expr, Group: -1}}
	if fc := aggCall(rt.Val); fc != nil {
		if it.t.Agg, err = c.checkAgg(fc, clause); err != nil {
			return nil, err
		}
	} else if hasAggCall(rt.Val) {
		it.composed = true // checked by composedItems, once GROUP BY is known
	} else {
		if err := c.checkExpr(rt.Val, clause, "%s() is an aggregate inside an expression; expressions over aggregates are not supported yet, select each aggregate as its own item and combine them when you read the target"); err != nil {
			return nil, err
		}
		it.t.Column, it.t.ColumnRef = c.plainColumn(rt.Val)
	}
	it.t.Name = rt.Name
	if it.t.Name == "" {
		it.t.Name = figureColname(rt.Val)
	}
	switch {
	case it.t.Name == "?column?":
		return nil, c.errf(rt.Location, "%s: PostgreSQL would name it \"?column?\"; give the expression an alias with AS", clause)
	case strings.HasPrefix(it.t.Name, reservedPrefix):
		return nil, c.errf(rt.Location, "%s: output name %q begins with %q, which is reserved for trellis's hidden columns; give it another alias with AS", clause, it.t.Name, reservedPrefix)
	}
	if prev, ok := seen[it.t.Name]; ok {
		return nil, c.errf(rt.Location, "%s: output name %q is already used by select list item %d; give one of them another alias with AS", clause, it.t.Name, prev)
	}
	seen[it.t.Name] = i + 1
	if _, err := c.deparse(rt.Val, clause); err != nil {
		return nil, err
	}
	if it.key, err = c.compareKey(rt.Val, clause); err != nil {
		return nil, err
	}
	return it, nil
}

// groupBy resolves and validates GROUP BY, then ties every select item to
// its group expression or aggregate.
func (c *selectChecker) groupBy(sel *pg_query.SelectStmt, items []*selectItem, q *Query) error {
	var keys []string
	for j, g := range sel.GroupClause {
		if gs := g.GetGroupingSet(); gs != nil {
			if gs.Kind == pg_query.GroupingSetKind_GROUPING_SET_EMPTY {
				return c.errf(gs.Location, "GROUP BY item %d: GROUP BY () is not supported; omit GROUP BY for a one-row aggregate", j+1)
			}
			return c.errf(gs.Location, "GROUP BY item %d: GROUPING SETS, ROLLUP and CUBE are not supported in a transform; GROUP BY plain expressions (one transform per grouping)", j+1)
		}
		text, err := c.deparse(g, fmt.Sprintf("GROUP BY item %d", j+1))
		if err != nil {
			return err
		}
		clause := fmt.Sprintf("GROUP BY item %d (%s)", j+1, text)
		expr, alias := g, ""
		if ac := g.GetAConst(); ac != nil && ac.GetIval() != nil {
			k := ac.GetIval().Ival
			if k < 1 || int(k) > len(items) {
				return c.errf(ac.Location, "%s: GROUP BY position %d is not in select list; the select list has %d items", clause, k, len(items))
			}
			expr = items[k-1].node
		} else if name := bareName(g); name != "" {
			for _, it := range items {
				if it.t.Name == name && it.t.Column != name {
					expr, alias = it.node, name
					break
				}
			}
		}
		if err := c.checkExpr(expr, clause, "aggregate functions are not allowed in GROUP BY (%s); group by plain expressions and select the aggregate as its own item"); err != nil {
			return err
		}
		key, err := c.compareKey(expr, clause)
		if err != nil {
			return err
		}
		dup := false
		for _, k := range keys {
			dup = dup || k == key
		}
		if dup {
			continue // GROUP BY a, a groups like GROUP BY a
		}
		deparsed, err := c.deparse(expr, clause)
		if err != nil {
			return err
		}
		if expr.GetAConst() != nil {
			// An ordinal naming a constant select item: PostgreSQL reads a
			// bare constant in GROUP BY as an ordinal (or refuses it), so the
			// grouping is written as a call that keeps the constant's type.
			deparsed = "COALESCE(" + deparsed + ")"
		}
		keys = append(keys, key)
		q.GroupBy = append(q.GroupBy, deparsed)
		q.GroupByAlias = append(q.GroupByAlias, alias)
	}
	c.groupKeys = keys
	q.Aggregate = len(q.GroupBy) > 0 || sel.HavingClause != nil
	for _, it := range items {
		q.Aggregate = q.Aggregate || it.t.Agg != nil || it.composed
	}
	if !q.Aggregate {
		return nil
	}
	for _, it := range items {
		if it.t.Agg != nil || it.composed {
			continue
		}
		for k, key := range keys {
			if key == it.key {
				it.t.Group = k
				break
			}
		}
		if it.t.Group < 0 {
			// An expression over GROUP BY expressions (region || '!'): kept
			// as a projection of the group's state, as PostgreSQL computes
			// it per group; composedItems refuses a column outside them.
			it.composed, it.grouped = true, true
		}
	}
	// A GROUP BY expression the select list does not name is kept in a
	// hidden column of the target: it is part of the target's key.
	return nil
}

// checkExpr walks an expression and refuses what a transform cannot keep
// exact. aggMsg is the sentence (with one %s for the function name) used
// when an aggregate call is found.
func (c *selectChecker) checkExpr(n *pg_query.Node, clause, aggMsg string) error {
	var errs []error
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if err := c.checkNode(m, clause, aggMsg); err != nil {
			errs = append(errs, err)
			return false // one refusal per offending node, not per part of it
		}
		return true
	})
	return joinRefusals(errs)
}

func (c *selectChecker) checkNode(m proto.Message, clause, aggMsg string) error {
	switch x := m.(type) {
	case *pg_query.SubLink:
		return c.errf(x.Location, "%s: subqueries in expressions are not supported yet; %s", clause, subLinkAdvice(x))
	case *pg_query.FuncCall:
		schema, name := funcName(x)
		builtin := schema == "" || schema == "pg_catalog"
		switch {
		case x.Over != nil:
			return c.errf(x.Location, "%s: window functions (%s … OVER) are not supported in a transform; remove OVER", clause, name)
		case builtin && windowOnlyFuncs[name] && !x.AggWithinGroup:
			return c.errf(x.Location, "%s: %s() is a window function; window functions are not supported in a transform", clause, name)
		case isAggregate(x):
			return c.errf(x.Location, "%s: "+aggMsg, clause, name)
		case builtin && volatileFuncs[name]:
			return c.errf(x.Location, "%s: %s() is not immutable (its result changes from call to call), so the target could never be kept equal to the query; remove it", clause, name)
		}
	case *pg_query.SQLValueFunction:
		return c.errf(x.Location, "%s: %s is not immutable (it depends on when or by whom the query runs), so the target could never be kept equal to the query; remove it or store the value in a source column", clause, sqlValueFuncName(x.Op))
	case *pg_query.ParamRef:
		return c.errf(x.Location, "%s: parameters ($%d) are not supported in a transform; write the value as a literal", clause, x.Number)
	case *pg_query.ColumnRef:
		return c.checkColumnRef(x, clause)
	case *pg_query.A_Star:
		return c.errf(-1, "%s: * is not supported in a transform; name the columns you need", clause)
	case *pg_query.GroupingFunc:
		return c.errf(x.Location, "%s: GROUPING() is not supported in a transform (grouping sets are not supported)", clause)
	case *pg_query.JsonObjectAgg:
		return c.errf(-1, "%s: JSON_OBJECTAGG is not supported in a transform; write jsonb_object_agg(key, value ORDER BY …)", clause)
	case *pg_query.JsonArrayAgg:
		return c.errf(-1, "%s: JSON_ARRAYAGG is not supported in a transform; write jsonb_agg(value ORDER BY …)", clause)
	case *pg_query.A_Indirection:
		if x.Arg.GetAConst() != nil {
			// PostgreSQL cannot select a field of or subscript an untyped
			// constant, and the deparser would drop the parentheses.
			return c.errf(nodeLocation(x.Arg), "%s: a field selection or subscript needs a typed value; cast the constant first, e.g. ('{1,2}'::int[])[1]", clause)
		}
	case *pg_query.TypeName:
		for _, m := range x.Typmods {
			if m.GetAConst() == nil && m.GetColumnRef() == nil {
				return c.errf(x.Location, "%s: type modifiers must be simple constants or identifiers (as PostgreSQL requires); write e.g. numeric(10, 2)", clause)
			}
		}
	case *pg_query.TypeCast:
		if word := specialDateTimeLiteral(x); word != "" {
			return c.errf(x.Location, "%s: the literal '%s' is read when the query runs, so it is not immutable; remove it or store the value in a source column", clause, word)
		}
	}
	return nil
}

func (c *selectChecker) checkColumnRef(cr *pg_query.ColumnRef, clause string) error {
	var parts []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return c.errf(cr.Location, "%s: * is not supported in a transform; name the columns you need", clause)
		}
		parts = append(parts, s.Sval)
	}
	ref := quoteIdents(parts)
	names := c.refNames()
	if len(parts) == 2 && c.fromRefused {
		return nil
	}
	switch {
	case len(parts) > 2:
		return c.errf(cr.Location, "%s: column reference %s has %d parts; refer to columns as %s.column or just column", clause, ref, len(parts), quoteIdents(names[:1]))
	case len(parts) == 2 && !contains(names, parts[0]) && c.single():
		return c.errf(cr.Location, "%s: column reference %s names %s, which is not the FROM table; the FROM table is referred to as %s, write %s or just %s", clause, ref, quoteIdents(parts[:1]),
			quoteIdents(names), quoteIdents([]string{names[0], parts[1]}), quoteIdents(parts[1:]))
	case len(parts) == 2 && !contains(names, parts[0]):
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = quoteIdents([]string{n})
		}
		return c.errf(cr.Location, "%s: column reference %s names %s, which is not a FROM table; the FROM tables are referred to as %s", clause, ref, quoteIdents(parts[:1]), strings.Join(quoted, ", "))
	}
	return nil
}

// plainColumn returns the column name and its qualifier ("" when
// unqualified) when n is a plain column reference, else "", "".
func (c *selectChecker) plainColumn(n *pg_query.Node) (column, ref string) {
	cr := n.GetColumnRef()
	if cr == nil {
		return "", ""
	}
	var parts []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return "", ""
		}
		parts = append(parts, s.Sval)
	}
	switch {
	case len(parts) == 1:
		return parts[0], ""
	case len(parts) == 2 && contains(c.refNames(), parts[0]):
		return parts[1], parts[0]
	}
	return "", ""
}

// compareKey is the text two expressions are compared by: the deparsed
// expression after dropping the FROM table's qualifier from column
// references, so that `o.region` and `region` compare equal as they do in
// PostgreSQL. With several tables the qualifiers stay: which table an
// unqualified name belongs to is the catalog's to say.
func (c *selectChecker) compareKey(n *pg_query.Node, clause string) (string, error) {
	clone := proto.Clone(n).(*pg_query.Node)
	walk(clone.ProtoReflect(), func(m proto.Message) bool {
		if cr, ok := m.(*pg_query.ColumnRef); ok && len(cr.Fields) == 2 && c.single() {
			if s := cr.Fields[0].GetString_(); s != nil && s.Sval == c.tables[0].RefName() && cr.Fields[1].GetString_() != nil {
				cr.Fields = cr.Fields[1:]
			}
		}
		return true
	})
	return c.deparse(clone, clause)
}

// deparse renders an expression as SQL text, naming the clause on failure.
func (c *selectChecker) deparse(n *pg_query.Node, clause string) (string, error) {
	s, err := deparseExpr(n)
	if err != nil {
		return "", terr.Wrap(terr.Validation, err, "%s: %s: this expression cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", c.label, clause, err)
	}
	if !sameExpr(n, s) {
		// The deparser dropped parentheses PostgreSQL needs (it renders
		// (t AT TIME ZONE 'UTC')::date without them): the text would mean
		// another expression, so it is refused rather than kept.
		return "", c.errf(nodeLocation(n), "%s: the expression %s does not read back as written after PostgreSQL's deparser renders it; write it another way, e.g. with function calls instead of operators (timezone('UTC', t) for t AT TIME ZONE 'UTC')", clause, s)
	}
	return s, nil
}

// sameExpr reports whether text parses back to the expression n (node
// locations aside).
func sameExpr(n *pg_query.Node, text string) bool {
	tree, err := pg_query.Parse("SELECT " + text)
	if err != nil || len(tree.Stmts) != 1 {
		return false
	}
	sel := tree.Stmts[0].GetStmt().GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 || sel.TargetList[0].GetResTarget() == nil {
		return false
	}
	a, b := proto.Clone(n).(*pg_query.Node), sel.TargetList[0].GetResTarget().Val
	clearLocations(a.ProtoReflect())
	clearLocations(b.ProtoReflect())
	return proto.Equal(a, b)
}

// clearLocations zeroes every location field below m.
func clearLocations(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "location" && fd.Kind() == protoreflect.Int32Kind:
			m.Clear(fd)
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				clearLocations(v.List().Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			clearLocations(v.Message())
		}
		return true
	})
}

// deparseExpr renders one expression node as SQL text by deparsing it as
// the single item of a SELECT.
func deparseExpr(node *pg_query.Node) (string, error) {
	rt := &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Val: node}}}
	out, err := deparseSelect(&pg_query.SelectStmt{TargetList: []*pg_query.Node{rt}})
	if err != nil {
		return "", err
	}
	s, ok := strings.CutPrefix(out, "SELECT ")
	if !ok {
		return "", fmt.Errorf("unexpected deparser output %q", out)
	}
	return s, nil
}

func deparseSelect(sel *pg_query.SelectStmt) (string, error) {
	tree := &pg_query.ParseResult{Stmts: []*pg_query.RawStmt{{Stmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}}}}
	out, err := pg_query.Deparse(tree)
	if err != nil {
		return "", fmt.Errorf("deparse: %w", err)
	}
	return out, nil
}

// walk visits m and every message below it in pre-order; visit returns
// false to skip a message's children.
func walk(m protoreflect.Message, visit func(proto.Message) bool) {
	if !m.IsValid() || !visit(m.Interface()) {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message(), visit)
			}
			return true
		}
		walk(v.Message(), visit)
		return true
	})
}

// nodeLocation returns the location field of the node's content, or -1.
func nodeLocation(n *pg_query.Node) int32 {
	if n == nil {
		return -1
	}
	m := n.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("node"))
	if fd == nil || fd.Message() == nil {
		return -1
	}
	inner := m.Get(fd).Message()
	lf := inner.Descriptor().Fields().ByName("location")
	if lf == nil || lf.Kind() != protoreflect.Int32Kind {
		return -1
	}
	return int32(inner.Get(lf).Int())
}

// aggCall returns the call when n is itself an aggregate call (not a window
// call).
func aggCall(n *pg_query.Node) *pg_query.FuncCall {
	fc := n.GetFuncCall()
	if fc == nil || fc.Over != nil || !isAggregate(fc) {
		return nil
	}
	return fc
}

// isAggregate reports whether a call is an aggregate: a built-in aggregate
// name, or aggregate-only syntax (*, DISTINCT, ORDER BY, FILTER, WITHIN
// GROUP). User-defined aggregates without such syntax are found later
// against the catalog.
func isAggregate(fc *pg_query.FuncCall) bool {
	schema, name := funcName(fc)
	if (schema == "" || schema == "pg_catalog") && (supportedAggs[name] || knownAggs[name]) {
		return true
	}
	return fc.AggStar || fc.AggDistinct || len(fc.AggOrder) > 0 || fc.AggFilter != nil || fc.AggWithinGroup
}

// funcName splits a call's name into schema ("" if unqualified) and name.
func funcName(fc *pg_query.FuncCall) (schema, name string) {
	var parts []string
	for _, n := range fc.Funcname {
		if s := n.GetString_(); s != nil {
			parts = append(parts, s.Sval)
		}
	}
	switch len(parts) {
	case 0:
		return "", ""
	case 1:
		return "", parts[0]
	default:
		return parts[len(parts)-2], parts[len(parts)-1]
	}
}

// selectsStar reports whether a select list (of the query or of a
// subquery in its FROM) has * or t.*.
func selectsStar(sel *pg_query.SelectStmt) bool {
	found := false
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		if rt, ok := m.(*pg_query.ResTarget); ok && rt.Val != nil {
			if cr := rt.Val.GetColumnRef(); cr != nil && hasStar(cr) {
				found = true
			}
		}
		if _, ok := m.(*pg_query.SubLink); ok {
			return false
		}
		return !found
	})
	return found
}

// ParseQuery parses and validates one SELECT, as the query of CREATE
// TRANSFORM name AS … (the expanded form of a definition with *).
func ParseQuery(name, sql string) (*Query, error) {
	return parseSelect(fmt.Sprintf("transform %q", name), sql, 0, len(sql))
}

func hasStar(cr *pg_query.ColumnRef) bool {
	for _, f := range cr.Fields {
		if f.GetAStar() != nil {
			return true
		}
	}
	return false
}

// bareName returns the name of a one-part column reference, else "".
func bareName(n *pg_query.Node) string {
	cr := n.GetColumnRef()
	if cr == nil || len(cr.Fields) != 1 {
		return ""
	}
	if s := cr.Fields[0].GetString_(); s != nil {
		return s.Sval
	}
	return ""
}

// quoteIdents renders a dotted name the way PostgreSQL would accept it.
func quoteIdents(parts []string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p
		if !isPlainIdent(p) {
			out[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
		}
	}
	return strings.Join(out, ".")
}

func isPlainIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r == '_':
		case (r >= '0' && r <= '9') || r == '$':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// specialDateTimeLiteral returns the word when a cast reads one of the
// date/time input strings that depend on the clock ('now', 'today', …).
func specialDateTimeLiteral(tc *pg_query.TypeCast) string {
	s := tc.GetArg().GetAConst().GetSval()
	if s == nil || tc.TypeName == nil || len(tc.TypeName.Names) == 0 {
		return ""
	}
	typ := tc.TypeName.Names[len(tc.TypeName.Names)-1].GetString_()
	if typ == nil {
		return ""
	}
	switch typ.Sval {
	case "date", "timestamp", "timestamptz", "time", "timetz":
	default:
		return ""
	}
	word := strings.ToLower(strings.TrimSpace(s.Sval))
	switch word {
	case "now", "today", "tomorrow", "yesterday":
		return word
	}
	return ""
}

func sqlValueFuncName(op pg_query.SQLValueFunctionOp) string {
	switch op {
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_DATE:
		return "CURRENT_DATE"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME_N:
		return "CURRENT_TIME"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP_N:
		return "CURRENT_TIMESTAMP"
	case pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME, pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME_N:
		return "LOCALTIME"
	case pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP, pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP_N:
		return "LOCALTIMESTAMP"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_ROLE:
		return "CURRENT_ROLE"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_USER:
		return "CURRENT_USER"
	case pg_query.SQLValueFunctionOp_SVFOP_USER:
		return "USER"
	case pg_query.SQLValueFunctionOp_SVFOP_SESSION_USER:
		return "SESSION_USER"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_CATALOG:
		return "CURRENT_CATALOG"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_SCHEMA:
		return "CURRENT_SCHEMA"
	}
	return "this SQL value function"
}

// figureColname names a select item without an alias the way PostgreSQL's
// FigureColname does (parser/parse_target.c).
func figureColname(n *pg_query.Node) string {
	if name, strength := figureColnameInternal(n); strength > 0 {
		return name
	}
	return "?column?"
}

// figureColnameInternal returns a name and its strength: 2 for a name taken
// from the expression, 1 for a fallback (a type or "case"), 0 for none.
func figureColnameInternal(n *pg_query.Node) (string, int) {
	if n == nil {
		return "", 0
	}
	switch x := n.Node.(type) {
	case *pg_query.Node_ColumnRef:
		if name := lastString(x.ColumnRef.Fields); name != "" {
			return name, 2
		}
	case *pg_query.Node_AIndirection:
		if name := lastString(x.AIndirection.Indirection); name != "" {
			return name, 2
		}
		return figureColnameInternal(x.AIndirection.Arg)
	case *pg_query.Node_FuncCall:
		if name := lastElemString(x.FuncCall.Funcname); name != "" {
			return name, 2
		}
	case *pg_query.Node_AExpr:
		if x.AExpr.Kind == pg_query.A_Expr_Kind_AEXPR_NULLIF {
			return "nullif", 2
		}
	case *pg_query.Node_TypeCast:
		name, strength := figureColnameInternal(x.TypeCast.Arg)
		if strength <= 1 && x.TypeCast.TypeName != nil {
			if t := lastElemString(x.TypeCast.TypeName.Names); t != "" {
				return t, 1
			}
		}
		return name, strength
	case *pg_query.Node_CollateClause:
		return figureColnameInternal(x.CollateClause.Arg)
	case *pg_query.Node_GroupingFunc:
		return "grouping", 2
	case *pg_query.Node_SubLink:
		switch x.SubLink.SubLinkType {
		case pg_query.SubLinkType_EXISTS_SUBLINK:
			return "exists", 2
		case pg_query.SubLinkType_ARRAY_SUBLINK:
			return "array", 2
		case pg_query.SubLinkType_EXPR_SUBLINK:
			if sel := x.SubLink.Subselect.GetSelectStmt(); sel != nil && len(sel.TargetList) > 0 {
				if rt := sel.TargetList[0].GetResTarget(); rt != nil {
					if rt.Name != "" {
						return rt.Name, 2
					}
					return figureColnameInternal(rt.Val)
				}
			}
		}
	case *pg_query.Node_CaseExpr:
		name, strength := figureColnameInternal(x.CaseExpr.Defresult)
		if strength <= 1 {
			return "case", 1
		}
		return name, strength
	case *pg_query.Node_AArrayExpr:
		return "array", 2
	case *pg_query.Node_RowExpr:
		return "row", 2
	case *pg_query.Node_CoalesceExpr:
		return "coalesce", 2
	case *pg_query.Node_MinMaxExpr:
		switch x.MinMaxExpr.Op {
		case pg_query.MinMaxOp_IS_GREATEST:
			return "greatest", 2
		case pg_query.MinMaxOp_IS_LEAST:
			return "least", 2
		}
	case *pg_query.Node_SqlvalueFunction:
		return strings.ToLower(sqlValueFuncName(x.SqlvalueFunction.Op)), 2
	case *pg_query.Node_XmlExpr:
		switch x.XmlExpr.Op {
		case pg_query.XmlExprOp_IS_XMLCONCAT:
			return "xmlconcat", 2
		case pg_query.XmlExprOp_IS_XMLELEMENT:
			return "xmlelement", 2
		case pg_query.XmlExprOp_IS_XMLFOREST:
			return "xmlforest", 2
		case pg_query.XmlExprOp_IS_XMLPARSE:
			return "xmlparse", 2
		case pg_query.XmlExprOp_IS_XMLPI:
			return "xmlpi", 2
		case pg_query.XmlExprOp_IS_XMLROOT:
			return "xmlroot", 2
		case pg_query.XmlExprOp_IS_XMLSERIALIZE:
			return "xmlserialize", 2
		}
	case *pg_query.Node_XmlSerialize:
		return "xmlserialize", 2
	case *pg_query.Node_JsonObjectConstructor:
		return "json_object", 2
	case *pg_query.Node_JsonArrayConstructor, *pg_query.Node_JsonArrayQueryConstructor:
		return "json_array", 2
	case *pg_query.Node_JsonObjectAgg:
		return "json_objectagg", 2
	case *pg_query.Node_JsonArrayAgg:
		return "json_arrayagg", 2
	}
	return "", 0
}

// lastString returns the last String element of a list, skipping other
// nodes (stars, subscripts).
func lastString(nodes []*pg_query.Node) string {
	name := ""
	for _, n := range nodes {
		if s := n.GetString_(); s != nil {
			name = s.Sval
		}
	}
	return name
}

// lastElemString returns the list's last element when it is a String.
func lastElemString(nodes []*pg_query.Node) string {
	if len(nodes) == 0 {
		return ""
	}
	if s := nodes[len(nodes)-1].GetString_(); s != nil {
		return s.Sval
	}
	return ""
}
