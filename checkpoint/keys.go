package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Key layout. Every key starts with a one-byte namespace; integers are
// big-endian so that byte order equals numeric order and prefix iteration
// works.
//
//	m<name>                                   meta: store id, format, LSNs, named state
//	d<transform><0x01><table>                 truncation marker  -> value
//	d<transform><0x02><table><encoded key>    dirty key          -> value
//	x<lsn>                                    visibility entry   -> xid be32
//	s<xid><subxid><seq>                       spilled chunk      -> encoded records
//
// A dirty value is lsn be64 followed by version be64 (see Entry.Version).
const (
	nsMeta  = 'm'
	nsDirty = 'd'
	nsXid   = 'x'
	nsSpill = 's'

	tagTrunc = 0x01
	tagKey   = 0x02
)

const (
	metaStoreID   = "store_id"
	metaFormat    = "format"
	metaReceived  = "received_lsn"
	metaConfirmed = "confirmed_lsn"
	metaStatePfx  = "state/"
)

// formatVersion is bumped when the key layout changes incompatibly.
const formatVersion = 1

func metaKey(name string) []byte {
	return append([]byte{nsMeta}, name...)
}

// transformBytes maps a signed transform id to an order-preserving uint64.
func transformBytes(b []byte, transform int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(transform)^(1<<63))
}

func transformFromBytes(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
}

// dirtyPrefix is the prefix of everything a transform has pending.
func dirtyPrefix(transform int64) []byte {
	return withNS(nsDirty, transform)
}

func withNS(ns byte, transform int64) []byte {
	b := make([]byte, 1, 16)
	b[0] = ns
	return transformBytes(b, transform)
}

func truncPrefix(transform int64) []byte {
	return append(withNS(nsDirty, transform), tagTrunc)
}

func keyPrefix(transform int64) []byte {
	return append(withNS(nsDirty, transform), tagKey)
}

func truncKey(transform int64, table uint32) []byte {
	return binary.BigEndian.AppendUint32(truncPrefix(transform), table)
}

func dirtyKey(transform int64, table uint32, key []byte) []byte {
	b := make([]byte, 0, 14+len(key))
	b = append(b, nsDirty)
	b = transformBytes(b, transform)
	b = append(b, tagKey)
	b = binary.BigEndian.AppendUint32(b, table)
	return append(b, key...)
}

func xidKey(lsn uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{nsXid}, lsn)
}

func spillPrefix(xid uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{nsSpill}, xid)
}

func spillSubPrefix(xid, subxid uint32) []byte {
	return binary.BigEndian.AppendUint32(spillPrefix(xid), subxid)
}

func spillKey(xid, subxid uint32, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(spillSubPrefix(xid, subxid), seq)
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

func encodeValue(lsn, version uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, lsn)
	binary.BigEndian.PutUint64(b[8:], version)
	return b
}

func decodeValue(v []byte) (lsn, version uint64, err error) {
	if len(v) != 16 {
		return 0, 0, fmt.Errorf("checkpoint: corrupt dirty value of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), nil
}

// EncodeKey encodes a row key given as the text form of its key columns.
// The encoding is unambiguous (length-prefixed), so DecodeKey restores
// exactly the same values; it is not meant to sort like the typed values.
func EncodeKey(values []string) []byte {
	n := 0
	for _, v := range values {
		n += binary.MaxVarintLen32 + len(v)
	}
	b := make([]byte, 0, n)
	for _, v := range values {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// errCorruptKey is returned by DecodeKey for bytes EncodeKey cannot produce.
var errCorruptKey = errors.New("checkpoint: corrupt encoded key")

// DecodeKey reverses EncodeKey.
func DecodeKey(b []byte) ([]string, error) {
	var out []string
	for len(b) > 0 {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, errCorruptKey
		}
		b = b[w:]
		out = append(out, string(b[:n]))
		b = b[n:]
	}
	return out, nil
}

// Spill chunk records: a tag byte, the transform (varint), the table
// (uvarint) and, for keys, the key length (uvarint) and bytes.
func appendSpillKey(b []byte, k DirtyKey) []byte {
	b = append(b, tagKey)
	b = binary.AppendVarint(b, k.Transform)
	b = binary.AppendUvarint(b, uint64(k.Table))
	b = binary.AppendUvarint(b, uint64(len(k.Key)))
	return append(b, k.Key...)
}

func appendSpillTrunc(b []byte, t TableRef) []byte {
	b = append(b, tagTrunc)
	b = binary.AppendVarint(b, t.Transform)
	return binary.AppendUvarint(b, uint64(t.Table))
}

var errCorruptSpill = errors.New("checkpoint: corrupt spill chunk")

// decodeSpill calls fn for every record of a chunk. Keys alias chunk.
func decodeSpill(chunk []byte, fn func(tag byte, transform int64, table uint32, key []byte) error) error {
	for len(chunk) > 0 {
		tag := chunk[0]
		chunk = chunk[1:]
		tr, w := binary.Varint(chunk)
		if w <= 0 {
			return errCorruptSpill
		}
		chunk = chunk[w:]
		table, w := binary.Uvarint(chunk)
		if w <= 0 || table > 1<<32-1 {
			return errCorruptSpill
		}
		chunk = chunk[w:]
		var key []byte
		switch tag {
		case tagKey:
			n, w := binary.Uvarint(chunk)
			if w <= 0 || n > uint64(len(chunk)-w) {
				return errCorruptSpill
			}
			key = chunk[w : w+int(n)]
			chunk = chunk[w+int(n):]
		case tagTrunc:
		default:
			return errCorruptSpill
		}
		if err := fn(tag, tr, uint32(table), key); err != nil {
			return err
		}
	}
	return nil
}
