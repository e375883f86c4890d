package payment

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// FingerprintVersion is the version of the canonical form new fingerprints
// are written in. Every fingerprint carries its version ("v1:<hex>"), and a
// stored one is checked in its own version (Request.Matches), never compared
// as a string with one computed under today's rules: a deploy that changes
// the canonical form must not turn the retries of every key in flight into
// 422s (a retry told 422 is an app told "refused" for a payment that was
// made, and its next tap pays again).
//
// Changing the canonical form is therefore two deploys, readers first:
// 1. add the new version to versions (every instance can now check it);
// 2. make it FingerprintVersion (instances write it).
// A version, once written, is never changed or removed while any key record
// or ledger row could still hold it (the ledger keeps rows forever).
const FingerprintVersion = "v1"

// v2 is v1 with the receipt address, the version of every request that has
// one (Fingerprint). v1 cannot hold an address, so it was not changed to
// take one: a key record written by a build that ignored the address is
// still checked in v1, without it. Readers of v2 shipped with its writers
// in one release: no release ever wrote a request with an address in
// another form, and no deployed fleet runs a build that cannot read v2.
const versionWithReceipt = "v2"

// canonical is one version's encoding of the meaning fields, the bytes that
// are hashed.
type canonical func(Request) []byte

// fingerprints is the set of versions this build can check, and the one it
// writes. It is replaced whole (copy on write), so readers need no lock.
type fingerprints struct {
	current string
	forms   map[string]canonical
}

var (
	table = func() *atomic.Pointer[fingerprints] {
		p := new(atomic.Pointer[fingerprints])
		p.Store(&fingerprints{current: FingerprintVersion, forms: map[string]canonical{
			"v1":               tagged("oncepay/payment/v1\n", false),
			versionWithReceipt: tagged("oncepay/payment/v2\n", true),
		}})
		return p
	}()
	deployMu sync.Mutex // serialises DeployNextVersion
)

// tagged is an encoding under a domain tag: the tag, then the five meaning
// fields in a fixed order (merchant_id, order_id, amount, currency,
// payment_method), each length-prefixed so that no shift of bytes between
// neighbouring fields ("ab"+"c" vs "a"+"bc") gives the same input; with
// receipt, a sixth, receipt_email (v2, and every later version).
func tagged(tag string, receipt bool) canonical {
	return func(r Request) []byte {
		buf := make([]byte, 0, 64+len(r.MerchantID)+len(r.OrderID)+len(r.PaymentMethod)+len(r.ReceiptEmail))
		buf = append(buf, tag...)
		var amount [20]byte
		fields := [...][]byte{
			[]byte(r.MerchantID),
			[]byte(r.OrderID),
			strconv.AppendInt(amount[:0], r.Amount, 10),
			[]byte(r.Currency),
			[]byte(r.PaymentMethod),
			[]byte(r.ReceiptEmail),
		}
		n := len(fields)
		if !receipt {
			n--
		}
		for _, f := range fields[:n] {
			// netstring-style: decimal length, ':', the bytes. The reader of
			// such a stream always knows where a field ends.
			buf = strconv.AppendInt(buf, int64(len(f)), 10)
			buf = append(buf, ':')
			buf = append(buf, f...)
			buf = append(buf, ',')
		}
		return buf
	}
}

func (r Request) fingerprintIn(version string, form canonical) string {
	sum := sha256.Sum256(form(r))
	return version + ":" + hex.EncodeToString(sum[:])
}

// Fingerprint is the hash of the request's meaning in the current version:
// the version, ':' and the hex SHA-256 of its canonical form (v1: the five
// meaning fields, see tagged; a request with a receipt address: v2, the
// six). It depends only on the Request, never on the
// body's bytes: member order, whitespace and ignored members do not change
// it.
//
// It is meant for a Request returned by Parse, whose currency is already
// upper-cased.
func (r Request) Fingerprint() string {
	t := table.Load()
	v := t.current
	if v == "v1" && r.ReceiptEmail != "" {
		v = versionWithReceipt
	}
	return r.fingerprintIn(v, t.forms[v])
}

// Matches reports whether stored (a fingerprint a key record or a ledger row
// holds) is this request's fingerprint in stored's own version: the same
// request across a deploy that changed the version. A version this build
// does not know never matches; the two-step deploy above keeps that from
// happening to a key in flight.
func (r Request) Matches(stored string) bool {
	version, _, ok := strings.Cut(stored, ":")
	if !ok {
		return false
	}
	form, known := table.Load().forms[version]
	return known && r.fingerprintIn(version, form) == stored
}

// DeployNextVersion does to this process what a deploy that changes the
// canonical form does: it adds a version after the newest one (same fields,
// another domain tag, so every fingerprint comes out different) and makes it
// the version new fingerprints are written in. The returned rollback makes
// the previous version current again and keeps the new one readable, as a
// rollback of the reader-first deploy would. For tests and drills only: the
// real next version is a reviewed change to the table.
func DeployNextVersion() (rollback func()) {
	deployMu.Lock()
	defer deployMu.Unlock()
	old := table.Load()
	next := "v" + strconv.Itoa(len(old.forms)+1)
	forms := make(map[string]canonical, len(old.forms)+1)
	for v, f := range old.forms {
		forms[v] = f
	}
	forms[next] = tagged("oncepay/payment/"+next+"-drill\n", true)
	table.Store(&fingerprints{current: next, forms: forms})
	return func() {
		deployMu.Lock()
		defer deployMu.Unlock()
		cur := table.Load()
		table.Store(&fingerprints{current: old.current, forms: cur.forms})
	}
}
