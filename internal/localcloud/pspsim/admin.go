package pspsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// serveAdmin serves the control API listed in the package documentation.
func (s *Sim) serveAdmin(w http.ResponseWriter, r *http.Request) {
	switch r.Method + " " + r.URL.Path {
	case "GET /_sim/charges":
		writeJSON(w, http.StatusOK, s.Charges())
	case "GET /_sim/refunds":
		writeJSON(w, http.StatusOK, s.Refunds())
	case "POST /_sim/faults":
		var f Fault
		if err := decodeJSON(r, &f); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := s.AddFault(f); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		if f.Times == 0 {
			f.Times = 1
		}
		writeJSON(w, http.StatusCreated, f)
	case "GET /_sim/stats":
		writeJSON(w, http.StatusOK, s.Stats())
	case "GET /_sim/faults":
		writeJSON(w, http.StatusOK, s.Faults())
	case "DELETE /_sim/faults":
		s.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	case "POST /_sim/reset":
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	case "GET /_sim/clock":
		writeJSON(w, http.StatusOK, map[string]string{"now": s.Now().Format(time.RFC3339Nano)})
	case "POST /_sim/clock":
		var body struct {
			AdvanceMS int64 `json:"advance_ms"`
		}
		if err := decodeJSON(r, &body); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		if body.AdvanceMS < 0 {
			writeProblem(w, http.StatusBadRequest, "advance_ms must not be negative: the clock only moves forward")
			return
		}
		s.Advance(time.Duration(body.AdvanceMS) * time.Millisecond)
		writeJSON(w, http.StatusOK, map[string]string{"now": s.Now().Format(time.RFC3339Nano)})
	case "GET /_sim/search_lag":
		writeJSON(w, http.StatusOK, map[string]int64{"lag_ms": s.SearchLag().Milliseconds()})
	case "POST /_sim/search_lag":
		var body struct {
			LagMS int64 `json:"lag_ms"`
		}
		if err := decodeJSON(r, &body); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := s.SetSearchLag(time.Duration(body.LagMS) * time.Millisecond); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]int64{"lag_ms": s.SearchLag().Milliseconds()})
	case "POST /_sim/payment_methods/attach":
		var body struct {
			PaymentMethod string `json:"payment_method"`
		}
		if err := decodeJSON(r, &body); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := s.AttachPaymentMethod(body.PaymentMethod); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "POST /_sim/webhooks/flush":
		n, err := s.FlushWebhooks(r.Context())
		out := map[string]any{"delivered": n, "pending": s.PendingWebhooks()}
		if err != nil {
			out["error"] = err.Error()
		}
		writeJSON(w, http.StatusOK, out)
	default:
		writeProblem(w, http.StatusNotFound, fmt.Sprintf("no admin endpoint %s %s", r.Method, r.URL.Path))
	}
	s.syncOrLog()
}

// decodeJSON reads one JSON object, refusing unknown fields so a typo in a
// fault rule is an error rather than a fault that never fires.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one value")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":   "about:blank",
		"title":  http.StatusText(status),
		"status": status,
		"detail": detail,
	})
}
