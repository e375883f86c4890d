package globaltable

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// fromStream converts a stream record's attribute map into the DynamoDB
// client's types (the two SDK packages each declare their own).
func fromStream(m map[string]streamtypes.AttributeValue) map[string]types.AttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		out[k] = fromStreamValue(v)
	}
	return out
}

func fromStreamValue(v streamtypes.AttributeValue) types.AttributeValue {
	switch a := v.(type) {
	case *streamtypes.AttributeValueMemberS:
		return &types.AttributeValueMemberS{Value: a.Value}
	case *streamtypes.AttributeValueMemberN:
		return &types.AttributeValueMemberN{Value: a.Value}
	case *streamtypes.AttributeValueMemberB:
		return &types.AttributeValueMemberB{Value: a.Value}
	case *streamtypes.AttributeValueMemberBOOL:
		return &types.AttributeValueMemberBOOL{Value: a.Value}
	case *streamtypes.AttributeValueMemberNULL:
		return &types.AttributeValueMemberNULL{Value: a.Value}
	case *streamtypes.AttributeValueMemberSS:
		return &types.AttributeValueMemberSS{Value: a.Value}
	case *streamtypes.AttributeValueMemberNS:
		return &types.AttributeValueMemberNS{Value: a.Value}
	case *streamtypes.AttributeValueMemberBS:
		return &types.AttributeValueMemberBS{Value: a.Value}
	case *streamtypes.AttributeValueMemberL:
		l := make([]types.AttributeValue, len(a.Value))
		for i, x := range a.Value {
			l[i] = fromStreamValue(x)
		}
		return &types.AttributeValueMemberL{Value: l}
	case *streamtypes.AttributeValueMemberM:
		return &types.AttributeValueMemberM{Value: fromStream(a.Value)}
	}
	return &types.AttributeValueMemberNULL{Value: true}
}

// canonical renders an attribute map the same way whatever its order:
// names sorted, set members sorted (DynamoDB keeps no set order).
func canonical(m map[string]types.AttributeValue) string {
	var b strings.Builder
	writeMap(&b, m)
	return b.String()
}

func writeMap(b *strings.Builder, m map[string]types.AttributeValue) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.WriteByte('{')
	for _, k := range keys {
		b.WriteString(strconv.Quote(k))
		b.WriteByte(':')
		writeValue(b, m[k])
		b.WriteByte(',')
	}
	b.WriteByte('}')
}

func writeValue(b *strings.Builder, v types.AttributeValue) {
	set := func(tag string, vals []string) {
		vals = slices.Clone(vals)
		slices.Sort(vals)
		b.WriteString(tag)
		for _, x := range vals {
			b.WriteString(strconv.Quote(x))
			b.WriteByte(',')
		}
		b.WriteByte(']')
	}
	switch a := v.(type) {
	case *types.AttributeValueMemberS:
		b.WriteString("S" + strconv.Quote(a.Value))
	case *types.AttributeValueMemberN:
		b.WriteString("N" + strconv.Quote(a.Value))
	case *types.AttributeValueMemberB:
		b.WriteString("B" + strconv.Quote(string(a.Value)))
	case *types.AttributeValueMemberBOOL:
		b.WriteString("BOOL" + strconv.FormatBool(a.Value))
	case *types.AttributeValueMemberNULL:
		b.WriteString("NULL")
	case *types.AttributeValueMemberSS:
		set("SS[", a.Value)
	case *types.AttributeValueMemberNS:
		set("NS[", a.Value)
	case *types.AttributeValueMemberBS:
		bs := make([]string, len(a.Value))
		for i, x := range a.Value {
			bs[i] = string(x)
		}
		set("BS[", bs)
	case *types.AttributeValueMemberL:
		b.WriteString("L[")
		for _, x := range a.Value {
			writeValue(b, x)
			b.WriteByte(',')
		}
		b.WriteByte(']')
	case *types.AttributeValueMemberM:
		b.WriteByte('M')
		writeMap(b, a.Value)
	default:
		b.WriteString("?")
	}
}

// removed is the digest of a deletion.
const removed = "-"

// digest identifies an item image (nil: the item removed), so the
// replicator knows its own writes when it reads them back.
func digest(image map[string]types.AttributeValue) string {
	if image == nil {
		return removed
	}
	sum := sha256.Sum256([]byte(canonical(image)))
	return hex.EncodeToString(sum[:])
}
