package engine

// aggparse.go owns aggregates in the SELECT: which aggregates are kept and
// which are known (supportedAggs, knownAggs), an aggregate call recognised
// (aggCall, isAggregate) and checked (checkAgg), expressions over aggregates
// and HAVING over the state, and DISTINCT as GROUP BY.

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// supportedAggregates names the aggregates a transform keeps, for advice.
const supportedAggregates = "count, sum, avg, min, max, bool_and, bool_or, every, bit_and, bit_or, bit_xor, string_agg, array_agg, jsonb_agg, jsonb_object_agg, " +
	"stddev, stddev_samp, stddev_pop, variance, var_samp, var_pop, corr, covar_pop, covar_samp, the regr_* aggregates, " +
	"percentile_cont, percentile_disc, mode, rank, dense_rank, percent_rank and cume_dist WITHIN GROUP, and user-defined aggregates"

// supportedAggs are the built-in aggregates this version can maintain
// (the ordered-set ones are withinGroupAggs).
var supportedAggs = map[string]bool{"count": true, "sum": true, "avg": true, "min": true, "max": true,
	"bool_and": true, "bool_or": true, "every": true, "bit_and": true, "bit_or": true, "bit_xor": true,
	"string_agg": true, "array_agg": true, "jsonb_agg": true, "jsonb_object_agg": true,
	// The statistics are recomputed per group (ADR 0031).
	"stddev": true, "stddev_samp": true, "stddev_pop": true, "variance": true, "var_samp": true, "var_pop": true,
	"corr": true, "covar_pop": true, "covar_samp": true, "regr_avgx": true, "regr_avgy": true, "regr_count": true,
	"regr_intercept": true, "regr_r2": true, "regr_slope": true, "regr_sxx": true, "regr_sxy": true, "regr_syy": true}

// withinGroupAggs are the built-in ordered-set and hypothetical-set
// aggregates, written name(direct arguments) WITHIN GROUP (ORDER BY …);
// recomputed per group (ADR 0031).
var withinGroupAggs = map[string]bool{"percentile_cont": true, "percentile_disc": true, "mode": true,
	"rank": true, "dense_rank": true, "percent_rank": true, "cume_dist": true}

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

// hasFuncCall reports whether an expression calls a function.
func hasFuncCall(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if _, ok := m.(*pg_query.FuncCall); ok {
			found = true
		}
		return !found
	})
	return found
}

// stateRef qualifies the columns of the aggregate state that Composed and
// Having expressions read.
const stateRef = "__s"

// checkAgg validates an aggregate call and describes it: its inputs and
// the call over them, so it can be recomputed from stored inputs.
func (c *selectChecker) checkAgg(fc *pg_query.FuncCall, clause string) (*Agg, error) {
	schema, name := funcName(fc)
	builtin := schema == "" || schema == "pg_catalog"
	if !builtin && isUserAggMarker(fc.AggFilter) {
		// Set by userAggregates: the catalog says this is an aggregate.
		fc = proto.Clone(fc).(*pg_query.FuncCall)
		fc.AggFilter = nil
	}
	switch {
	case builtin && fc.AggWithinGroup && !withinGroupAggs[name]:
		return nil, c.errf(fc.Location, "%s: %s is not an ordered-set aggregate PostgreSQL knows; the WITHIN GROUP aggregates a transform keeps are percentile_cont, percentile_disc, mode, rank, dense_rank, percent_rank and cume_dist", clause, name)
	case builtin && withinGroupAggs[name] && !fc.AggWithinGroup:
		return nil, c.errf(fc.Location, "%s: %s is an ordered-set aggregate; write it with WITHIN GROUP, e.g. percentile_cont(0.5) WITHIN GROUP (ORDER BY x)", clause, name)
	case builtin && !supportedAggs[name] && !withinGroupAggs[name]:
		return nil, c.errf(fc.Location, "%s: aggregate %s is not supported yet; supported aggregates are "+supportedAggregates, clause, name)
	case fc.FuncVariadic:
		return nil, c.errf(fc.Location, "%s: VARIADIC is not supported in an aggregate call; pass the arguments one by one", clause)
	case fc.AggStar && name != "count":
		return nil, c.errf(fc.Location, "%s: only count accepts *; write %s(expression)", clause, name)
	case len(fc.Args) == 0 && !fc.AggStar && name == "count":
		return nil, c.errf(fc.Location, "%s: count() needs an argument; write count(*) to count rows", clause)
	case orderedAggs[name] && len(fc.AggOrder) == 0:
		return nil, c.errf(fc.Location, "%s: %s without ORDER BY inside the call has no defined order (in PostgreSQL either), so the target could not be kept equal to the query; add one, e.g. %s(x ORDER BY x)", clause, name, name)
	}
	for _, a := range fc.Args {
		if a.GetNamedArgExpr() != nil {
			return nil, c.errf(fc.Location, "%s: named arguments are not supported in an aggregate call; pass the arguments by position", clause)
		}
	}
	text, err := c.deparse(&pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: fc}}, clause)
	if err != nil {
		return nil, err
	}
	agg := &Agg{Func: name, Star: fc.AggStar, Text: text, User: !builtin, Ordered: len(fc.AggOrder) > 0,
		Plain: builtin && len(fc.Args) <= 1 && !fc.AggDistinct && len(fc.AggOrder) == 0 && fc.AggFilter == nil && !fc.AggWithinGroup}
	if !agg.Ordered && builtin && orderSensitiveAggs[name] {
		// The advice of a refusal planAggregates may make once it knows
		// the input types: the call ordered by the first source's key.
		hint := proto.Clone(fc).(*pg_query.FuncCall)
		hint.AggOrder = []*pg_query.Node{{Node: &pg_query.Node_SortBy{SortBy: &pg_query.SortBy{Node: columnRef(orderHintKey), Location: -1}}}}
		if agg.OrderHint, err = deparseExpr(&pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: hint}}); err != nil {
			agg.OrderHint = ""
		}
	}
	// The call over placeholders: each input becomes __trellis_in_<i>.
	call := proto.Clone(fc).(*pg_query.FuncCall)
	input := func(n *pg_query.Node) (*pg_query.Node, error) {
		if err := c.checkExpr(n, clause, "aggregate calls cannot be nested (%s inside "+name+"); aggregate a plain expression"); err != nil {
			return nil, err
		}
		s, err := c.deparse(n, clause)
		if err != nil {
			return nil, err
		}
		agg.Inputs = append(agg.Inputs, s)
		return columnRef(AggInput(len(agg.Inputs) - 1)), nil
	}
	for i, a := range call.Args {
		if fc.AggWithinGroup {
			break
		}
		if call.Args[i], err = input(a); err != nil {
			return nil, err
		}
	}
	if fc.AggWithinGroup {
		// The direct arguments stay as written: a recompute reads the
		// group's ledger rows without GROUP BY, where PostgreSQL allows
		// only constants there.
		for _, a := range fc.Args {
			if err := c.checkExpr(a, clause, "aggregate calls cannot be nested (%s inside "+name+"); aggregate a plain expression"); err != nil {
				return nil, err
			}
			if len(columnNames(a)) > 0 {
				return nil, c.errf(fc.Location, "%s: the direct argument of %s reads a column; in a transform it must be a constant, e.g. %s(0.5) WITHIN GROUP (ORDER BY x) (one transform per fraction, or an array of fractions: percentile_cont(ARRAY[0.25, 0.5]))", clause, name, name)
			}
		}
	}
	for _, o := range call.AggOrder {
		if sb := o.GetSortBy(); sb != nil {
			if sb.Node, err = input(sb.Node); err != nil {
				return nil, err
			}
		}
	}
	if call.AggFilter != nil {
		if call.AggFilter, err = input(call.AggFilter); err != nil {
			return nil, err
		}
	}
	if agg.Call, err = c.deparse(&pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: call}}, clause); err != nil {
		return nil, err
	}
	if len(agg.Inputs) > 0 && len(fc.Args) > 0 {
		agg.Arg = agg.Inputs[0]
	}
	return agg, nil
}

// columnRef is a ColumnRef node of the given name parts.
func columnRef(parts ...string) *pg_query.Node {
	var fields []*pg_query.Node
	for _, p := range parts {
		fields = append(fields, &pg_query.Node{Node: &pg_query.Node_String_{String_: &pg_query.String{Sval: p}}})
	}
	return &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{Fields: fields, Location: -1}}}
}

// hasAggCall reports whether an expression calls an aggregate.
func hasAggCall(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if _, ok := m.(*pg_query.SubLink); ok {
			return false // a subquery's aggregates are its own
		}
		if fc, ok := m.(*pg_query.FuncCall); ok && fc.Over == nil && isAggregate(fc) {
			found = true
		}
		return !found
	})
	return found
}

// addAgg records a distinct aggregate call of the query and returns its
// index in q.Aggs.
func addAgg(q *Query, a *Agg) int {
	for k, o := range q.Aggs {
		if o.Text == a.Text {
			return k
		}
	}
	q.Aggs = append(q.Aggs, a)
	return len(q.Aggs) - 1
}

// overState rewrites an expression over aggregates and group keys (a
// composed select item, or HAVING) into one over the aggregate state:
// each aggregate call becomes __s.__x<k>, each GROUP BY expression the
// state column of the item that selects it. A column left outside both
// sends an unqualified definition to PostgreSQL (c.needsCatalog), and in
// qualified text is functionally dependent on a grouped key (dependentKey);
// under grouping sets it is the error PostgreSQL gives ("must appear in
// the GROUP BY clause").
func (c *selectChecker) overState(n *pg_query.Node, clause string, items []*selectItem, q *Query) (string, error) {
	if err := c.checkExprAggsAllowed(n, clause); err != nil {
		return "", err
	}
	groupName := map[int]string{}
	for _, it := range items {
		if it.t.Agg == nil && it.t.Composed == "" && it.t.Group >= 0 {
			if _, ok := groupName[it.t.Group]; !ok {
				groupName[it.t.Group] = it.t.Name
			}
		}
	}
	var err error
	out := replaceNodes(proto.Clone(n).(*pg_query.Node), func(x *pg_query.Node) *pg_query.Node {
		if err != nil {
			return x
		}
		if fc := aggCall(x); fc != nil {
			a, aerr := c.checkAgg(fc, clause)
			if aerr != nil {
				err = aerr
				return x
			}
			return columnRef(stateRef, fmt.Sprintf("__x%d", addAgg(q, a)))
		}
		if x.GetAConst() != nil {
			return nil
		}
		key, kerr := c.compareKey(x, clause)
		if kerr != nil {
			return nil
		}
		for g, k := range c.groupKeys {
			if k == key {
				if name, ok := groupName[g]; ok {
					return columnRef(stateRef, name)
				}
				return columnRef(stateRef, fmt.Sprintf("__g%d", g)) // not selected: hidden
			}
		}
		if x.GetColumnRef() == nil {
			return nil
		}
		switch {
		case !c.qualified:
			// Which table the column is of, and whether it depends on a
			// grouped primary key, is PostgreSQL's to say: the definition
			// is expanded and read again qualified (ADR 0037).
			c.needsCatalog = true
			return columnRef(stateRef, "__unresolved")
		case q.Grouping == nil:
			g, derr := c.dependentKey(x, clause, q)
			if derr != nil {
				err = derr
				return x
			}
			return columnRef(stateRef, fmt.Sprintf("__g%d", g))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	walk(out.ProtoReflect(), func(m proto.Message) bool {
		if cr, ok := m.(*pg_query.ColumnRef); ok && err == nil {
			if s := cr.Fields[0].GetString_(); s == nil || s.Sval != stateRef || len(cr.Fields) != 2 {
				err = c.errf(cr.Location, "%s reads a column outside an aggregate that is not a GROUP BY expression (PostgreSQL: it must appear in the GROUP BY clause or be used in an aggregate function); add it to GROUP BY or wrap it in an aggregate", clause)
			}
		}
		return err == nil
	})
	if err != nil {
		return "", err
	}
	return c.deparse(out, clause)
}

// checkExprAggsAllowed is checkExpr for an expression that may call
// aggregates: the calls are checked by checkAgg, the rest as usual.
func (c *selectChecker) checkExprAggsAllowed(n *pg_query.Node, clause string) error {
	var err error
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if err != nil {
			return false
		}
		if fc, ok := m.(*pg_query.FuncCall); ok && fc.Over == nil && isAggregate(fc) {
			return false
		}
		err = c.checkNode(m, clause, "%s")
		return err == nil
	})
	return err
}

// distinctAsGroupBy rewrites SELECT DISTINCT without aggregates as GROUP BY
// every select item: the same rows, kept by the aggregate shape.
func (c *selectChecker) distinctAsGroupBy(sel *pg_query.SelectStmt) error {
	if len(sel.DistinctClause) != 1 || sel.DistinctClause[0].GetNode() != nil {
		return nil // DISTINCT ON is refused by checkClauses
	}
	if len(sel.GroupClause) > 0 || sel.HavingClause != nil || hasAggregate(sel) {
		return c.errf(-1, "DISTINCT together with GROUP BY or aggregates is not supported yet; remove DISTINCT where the select list keeps every GROUP BY expression (grouped rows are distinct then), or else take the distinct rows of the grouped query: SELECT DISTINCT … FROM (SELECT … GROUP BY …) AS g")
	}
	sel.DistinctClause = nil
	for i := range sel.TargetList {
		sel.GroupClause = append(sel.GroupClause, &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
			Val: &pg_query.A_Const_Ival{Ival: &pg_query.Integer{Ival: int32(i + 1)}}, Location: -1}}})
	}
	return nil
}

// composedItems turns the select items that are expressions over
// aggregates, and HAVING, into expressions over the aggregate state.
func (c *selectChecker) composedItems(sel *pg_query.SelectStmt, items []*selectItem, q *Query) error {
	for i, it := range items {
		if it.t.Agg != nil {
			addAgg(q, it.t.Agg)
			continue
		}
		if !it.composed {
			continue
		}
		clause := fmt.Sprintf("select list item %d (%s)", i+1, it.t.Expr)
		if it.grouped {
			if err := c.checkExpr(it.node, clause, "%s"); err != nil {
				return err
			}
		}
		s, err := c.overState(it.node, clause, items, q)
		if err != nil && it.grouped {
			err = c.errf(it.loc, "%s is neither a GROUP BY expression nor an aggregate, nor computed from them (PostgreSQL: it must appear in the GROUP BY clause or be used in an aggregate function); add it to GROUP BY or wrap it in an aggregate", clause)
			if hasFuncCall(it.node) {
				// The parser knows aggregates by name: a user-defined one
				// reads as a plain function over an ungrouped column, which
				// only the catalog can tell (userAggregates).
				if q.deferred == nil {
					q.deferred = err
				}
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		it.t.Composed = s
	}
	if sel.HavingClause == nil {
		return nil
	}
	var err error
	if q.HavingSQL, err = c.deparse(sel.HavingClause, "HAVING"); err != nil {
		return err
	}
	q.Having, err = c.overState(sel.HavingClause, "HAVING ("+strings.TrimSpace(q.HavingSQL)+")", items, q)
	if err != nil && hasFuncCall(sel.HavingClause) {
		if q.deferred == nil {
			q.deferred = err // perhaps a user-defined aggregate (userAggregates)
		}
		return nil
	}
	return err
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
