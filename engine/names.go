package engine

// names.go owns names: PostgreSQL's rules for identifiers (length, case
// folding, quoting), the prefix trellis reserves for its hidden columns, a
// call's and a bare column reference's name, the name PostgreSQL gives a
// select item without an alias (figureColname), and generated identifiers
// (sanitizeName).

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer names would be silently
// truncated by the server, so they are refused instead.
const maxIdentLen = 63

// reservedPrefix starts the names of trellis's hidden target columns.
const reservedPrefix = "__"

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

// sanitizeName makes a string usable inside a generated identifier.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + 32)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 50 {
		out = out[:50]
	}
	return out
}
