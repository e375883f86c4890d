package pspsim

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/psp/stripespec"
)

// op runs one API endpoint with s.mu held. It returns the reply and whether
// the endpoint ran (true: save the reply under the key; false: a validation
// failure, which Stripe does not save).
type op func(s *Sim, form url.Values, key string) (reply, bool)

// route picks the endpoint for a request, or answers 404 like Stripe.
func route(r *http.Request) (op, string, *reply) {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/v1/payment_intents":
		return (*Sim).createPaymentIntent, "", nil
	case r.Method == http.MethodPost && p == "/v1/refunds":
		return (*Sim).createRefund, "", nil
	case r.Method == http.MethodGet && p == "/v1/refunds":
		return (*Sim).listRefunds, "", nil
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/refunds/") &&
		!strings.Contains(strings.TrimPrefix(p, "/v1/refunds/"), "/"):
		return (*Sim).getRefund, strings.TrimPrefix(p, "/v1/refunds/"), nil
	case r.Method == http.MethodGet && p == "/v1/payment_intents":
		return (*Sim).listPaymentIntents, "", nil
	case r.Method == http.MethodGet && p == "/v1/payment_intents/search":
		return (*Sim).searchPaymentIntents, "", nil
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/payment_intents/") &&
		!strings.Contains(strings.TrimPrefix(p, "/v1/payment_intents/"), "/"):
		return (*Sim).getPaymentIntent, strings.TrimPrefix(p, "/v1/payment_intents/"), nil
	}
	rep := errorReply(http.StatusNotFound, apiError{
		Type:    typeInvalidRequest,
		Message: fmt.Sprintf("Unrecognized request URL (%s: %s). pspsim serves only the endpoints oncepay uses.", r.Method, p),
	})
	return nil, "", &rep
}

// serveAPI answers a Stripe API request: faults at arrival, the idempotency
// layer, the endpoint, and faults on the way out.
func (s *Sim) serveAPI(w http.ResponseWriter, r *http.Request) {
	key := ""
	if r.Method == http.MethodPost {
		key = strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	}
	if rep, refused := s.credentialFault(key, r.URL.Path); refused {
		writeReply(w, rep)
		return
	}
	fault, faulted := s.takeFault(FaultKind.atArrival, key, r.URL.Path)
	if faulted && fault.Kind == FaultDropBefore {
		s.log.Info("fault: connection dropped before processing", "fault", fault.Kind, "path", r.URL.Path, "idempotency_key", key)
		panic(http.ErrAbortHandler) // net/http closes the connection without a reply
	}

	rep := s.handle(r, key, fault, faulted)
	// What the reply says is made durable before anyone hears it (state.go);
	// a write error is logged and the simulator answers from memory.
	_ = s.sync()

	if faulted && fault.Kind == FaultLoseReply {
		s.log.Info("fault: reply lost after processing", "fault", fault.Kind, "path", r.URL.Path,
			"idempotency_key", key, "status", rep.status)
		s.wait(r, fault.delay())
		panic(http.ErrAbortHandler)
	}
	writeReply(w, rep)
}

// handle produces the reply for a request (without writing it).
func (s *Sim) handle(r *http.Request, key string, fault Fault, faulted bool) reply {
	if r.Header.Get("Authorization") == "" {
		return errorReply(http.StatusUnauthorized, apiError{
			Type:    typeInvalidRequest,
			Message: "You did not provide an API key. Provide it in the Authorization header (Bearer auth).",
		})
	}
	run, id, notFound := route(r)
	if notFound != nil {
		return *notFound
	}
	var form url.Values
	if r.Method == http.MethodPost {
		if err := r.ParseForm(); err != nil {
			return invalid("", "", "Invalid form-encoded body: "+err.Error())
		}
		form = r.PostForm
	} else {
		form = r.URL.Query()
		if id != "" {
			form.Set("id", id)
		}
	}

	// Stripe's documented value limits (amount, currency, metadata, key
	// length, search syntax), which its OpenAPI spec does not carry: refused
	// before anything runs, and nothing is saved, as Stripe does.
	if v := stripespec.Check(r.Method, r.URL.Path, form, key); v != nil {
		return invalid(v.Param, v.Code, v.Message)
	}
	if key == "" { // GETs, and POSTs without a key, are not deduplicated
		s.slow(r, fault, faulted)
		rep, _ := s.execute(run, form, key, r.Method, r.URL.Path)
		return rep
	}
	if len(key) > 255 {
		return invalid("", "", "Idempotency keys can be up to 255 characters long.")
	}
	fingerprint := r.Method + " " + r.URL.Path + "\n" + form.Encode() // Encode sorts by name
	entry, early := s.beginKey(key, fingerprint)
	if early != nil {
		early.idemKey = key
		early.requestID = s.requestID()
		return *early
	}
	s.slow(r, fault, faulted)
	rep, ran := s.execute(run, form, key, r.Method, r.URL.Path)
	rep.idemKey = key
	s.finishKey(key, entry, rep, ran)
	return rep
}

// execute runs the endpoint under the lock, unless an error_5xx fault fires:
// then it answers 500 without running anything, and the 500 counts as run
// (it is saved under the key, as Stripe saves its 500s).
func (s *Sim) execute(run op, form url.Values, key, method, path string) (reply, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reqID := s.newIDLocked("req")
	if f, ok := s.takeFaultLocked(isError5xx, key, path); ok {
		s.log.Info("fault: answered 500 without processing", "fault", f.Kind, "path", path, "idempotency_key", key)
		rep := errorReply(http.StatusInternalServerError, apiError{
			Type:    typeAPI,
			Message: "An unknown error occurred (injected by pspsim).",
		})
		rep.requestID = reqID
		return rep, true
	}
	s.settleRefundsLocked(s.nowLocked())
	if rep, refused := s.checkPaymentMethodLocked(method, path, form); refused {
		rep.requestID = reqID
		return rep, false
	}
	rep, ran := run(s, form, key)
	if ran && rep.status < 300 {
		s.notePaymentMethodLocked(method, path, form, rep)
	}
	if f, ok := s.takeAfterRunLocked(ran, key, path); ok {
		// Stripe saves a result once execution has begun: the side effect
		// stands, and the 500 is what the key answers from now on.
		s.log.Info("fault: answered 500 after processing", "fault", f.Kind, "path", path, "idempotency_key", key, "status_was", rep.status)
		rep = errorReply(http.StatusInternalServerError, apiError{
			Type:    typeAPI,
			Message: "An unknown error occurred (injected by pspsim after the request ran).",
		})
	}
	rep.requestID = reqID
	return rep, ran
}

func (s *Sim) requestID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newIDLocked("req")
}

// slow applies a slow fault: the request waits, with its key in flight,
// and then runs even if the client has gone (as a real server would).
func (s *Sim) slow(r *http.Request, fault Fault, faulted bool) {
	if !faulted || fault.Kind != FaultSlow {
		return
	}
	s.log.Info("fault: slow request", "fault", fault.Kind, "path", r.URL.Path, "delay_ms", fault.DelayMS)
	t := time.NewTimer(fault.delay())
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.ctx.Done():
	}
}

// wait holds a lost reply for d, or until the client disconnects or the
// simulator closes.
func (s *Sim) wait(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	case <-s.ctx.Done():
	}
}
