package engine

// walk.go owns walking pg_query parse trees: visiting every message below a
// node (walk), a node's location (nodeLocation), and locations cleared so
// that two trees compare by content (clearLocations).

import (
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

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
