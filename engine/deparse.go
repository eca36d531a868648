package engine

// deparse.go owns turning parse trees back into SQL text. Every statement
// the engine keeps or runs that it rebuilt from a tree goes through
// deparse, which guarantees the text parses back to the tree it came from.
//
// Why: pg_query's bundled deparser leaves out parentheses some operands
// need. (a OR b)::boolean comes out as a OR b::boolean, which fails;
// (a OR b) IS NULL as a OR b IS NULL and (a AND b) IS NOT DISTINCT FROM c as
// a AND b IS NOT DISTINCT FROM c, which parse — as other expressions. A
// definition rendered so would be kept equal to a query the user never
// wrote, with no error anywhere.

import (
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// deparse renders tree as SQL text that parses back to tree (locations
// aside, and AND/OR nesting the parser flattens). When the deparser's
// plain rendering does not, it renders a copy whose compound operands are
// each wrapped so that the deparser writes them in parentheses (the
// parser drops them again, so the text still reads as tree); when even
// that does not read back, the tree is refused rather than kept as text
// that means something else.
func deparse(tree *pg_query.ParseResult) (string, error) {
	out, err := pg_query.Deparse(tree)
	if err != nil {
		return "", err
	}
	if readsBack(tree, out) {
		return out, nil
	}
	wrapped := proto.Clone(tree).(*pg_query.ParseResult)
	parenthesizeOperands(wrapped.ProtoReflect())
	safe, err := pg_query.Deparse(wrapped)
	if err != nil {
		return "", err
	}
	if !readsBack(tree, safe) {
		return "", fmt.Errorf("the deparser's text %q does not read back as the query it renders", safe)
	}
	return safe, nil
}

// readsBack reports whether text parses to tree.
func readsBack(tree *pg_query.ParseResult, text string) bool {
	back, err := pg_query.Parse(text)
	if err != nil {
		return false
	}
	return sameTree(flattened(tree).ProtoReflect(), flattened(back).ProtoReflect())
}

// flattened returns a copy of tree with AND inside AND (OR inside OR)
// written as one list, as the parser writes them.
func flattened(tree *pg_query.ParseResult) *pg_query.ParseResult {
	c := proto.Clone(tree).(*pg_query.ParseResult)
	walk(c.ProtoReflect(), func(m proto.Message) bool {
		if b, ok := m.(*pg_query.BoolExpr); ok && b.Boolop != pg_query.BoolExprType_NOT_EXPR {
			b.Args = flattenBool(b.Boolop, b.Args)
		}
		return true
	})
	return c
}

// sameTree compares two parse trees by what text carries: locations and
// statement offsets are ignored, and an enum left at its zero value
// (undefined: a node the engine built, where the parser writes the
// default) matches any value.
//
// It visits only the fields set in either message (Range): a Node is a
// oneof of some 250 node types, and asking each of them whether it is set
// was a quarter of the CPU of defining a transform.
func sameTree(a, b protoreflect.Message) bool {
	if a.Descriptor() != b.Descriptor() {
		return false
	}
	same := true
	a.Range(func(fd protoreflect.FieldDescriptor, va protoreflect.Value) bool {
		switch {
		case ignoredField(fd):
		case fd.Kind() == protoreflect.EnumKind && !fd.IsList():
			// Zero in b (unset) matches any value.
			if b.Has(fd) && b.Get(fd).Enum() != va.Enum() {
				same = false
			}
		case !b.Has(fd):
			same = false
		case fd.IsList():
			la, lb := va.List(), b.Get(fd).List()
			if la.Len() != lb.Len() {
				same = false
				break
			}
			for j := 0; j < la.Len() && same; j++ {
				if fd.Message() != nil {
					same = sameTree(la.Get(j).Message(), lb.Get(j).Message())
				} else {
					same = la.Get(j).Equal(lb.Get(j))
				}
			}
		case fd.Message() != nil:
			same = sameTree(va.Message(), b.Get(fd).Message())
		default:
			same = va.Equal(b.Get(fd))
		}
		return same
	})
	if !same {
		return false
	}
	// What b sets and a does not (an enum aside, whose zero matches).
	b.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !ignoredField(fd) && (fd.Kind() != protoreflect.EnumKind || fd.IsList()) && !a.Has(fd) {
			same = false
		}
		return same
	})
	return same
}

// ignoredField reports whether sameTree ignores fd: where the text was
// (locations, statement offsets) and the parser's version.
func ignoredField(fd protoreflect.FieldDescriptor) bool {
	switch fd.Name() {
	case "location", "stmt_location", "stmt_len", "version":
		return true
	}
	return false
}

// flattenBool lifts the arguments of nested op expressions into one list.
func flattenBool(op pg_query.BoolExprType, args []*pg_query.Node) []*pg_query.Node {
	var out []*pg_query.Node
	for _, a := range args {
		if b := a.GetBoolExpr(); b != nil && b.Boolop == op {
			out = append(out, flattenBool(op, b.Args)...)
			continue
		}
		out = append(out, a)
	}
	return out
}

// operandFields are the fields, per expression node, that hold operands
// the deparser may write without the parentheses their precedence needs.
var operandFields = map[protoreflect.FullName][]protoreflect.Name{
	"pg_query.TypeCast":      {"arg"},
	"pg_query.NullTest":      {"arg"},
	"pg_query.BooleanTest":   {"arg"},
	"pg_query.A_Expr":        {"lexpr", "rexpr"},
	"pg_query.BoolExpr":      {"args"},
	"pg_query.CollateClause": {"arg"},
	"pg_query.SubLink":       {"testexpr"},
}

// parenthesizeOperands wraps, below m, every compound operand of an
// operator in two empty indirections: the deparser writes an indirection
// over an indirection as (inner), and the inner one as its argument, so
// the operand comes out in parentheses, which the parser drops.
func parenthesizeOperands(m protoreflect.Message) {
	walk(m, func(pm proto.Message) bool {
		r := pm.ProtoReflect()
		for _, name := range operandFields[r.Descriptor().FullName()] {
			fd := r.Descriptor().Fields().ByName(name)
			if fd == nil || !r.Has(fd) {
				continue
			}
			if fd.IsList() {
				l := r.Get(fd).List()
				for i := 0; i < l.Len(); i++ {
					if n, ok := l.Get(i).Message().Interface().(*pg_query.Node); ok {
						l.Set(i, protoreflect.ValueOfMessage(wrapCompound(n).ProtoReflect()))
					}
				}
				continue
			}
			if n, ok := r.Get(fd).Message().Interface().(*pg_query.Node); ok {
				r.Set(fd, protoreflect.ValueOfMessage(wrapCompound(n).ProtoReflect()))
			}
		}
		return true
	})
}

// wrapCompound returns n wrapped for parentheses when it is an operator
// expression, the elements of a list (BETWEEN's bounds) each so, and any
// other node as it is.
func wrapCompound(n *pg_query.Node) *pg_query.Node {
	switch x := n.GetNode().(type) {
	case *pg_query.Node_List:
		for i, item := range x.List.Items {
			x.List.Items[i] = wrapCompound(item)
		}
		return n
	case *pg_query.Node_BoolExpr, *pg_query.Node_NullTest, *pg_query.Node_BooleanTest, *pg_query.Node_AExpr,
		*pg_query.Node_CollateClause, *pg_query.Node_JsonIsPredicate, *pg_query.Node_XmlExpr:
	case *pg_query.Node_FuncCall:
		if x.FuncCall.Funcformat != pg_query.CoercionForm_COERCE_SQL_SYNTAX {
			return n // f(…) needs no parentheses; x AT TIME ZONE z and the like do
		}
	default:
		return n
	}
	inner := &pg_query.Node{Node: &pg_query.Node_AIndirection{AIndirection: &pg_query.A_Indirection{Arg: n}}}
	return &pg_query.Node{Node: &pg_query.Node_AIndirection{AIndirection: &pg_query.A_Indirection{Arg: inner}}}
}
