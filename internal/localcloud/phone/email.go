package phone

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Email is one message the local cloud's SES (moto) took: the phone's
// inbox, every address's (LOCAL-ONLY: moto records what it was asked to
// send; nothing is delivered).
type Email struct {
	ID      string   `json:"id"`
	From    string   `json:"from"`
	To      []string `json:"to"`
	Subject string   `json:"subject"`
	Body    string   `json:"body"`
}

// Emails reads the messages moto's SES took, oldest first, from moto's own
// record of its state (/moto-api/data.json: moto only, not LocalStack).
func Emails(ctx context.Context, motoURL string) ([]Email, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(motoURL, "/")+"/moto-api/data.json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("phone: moto's state: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("phone: moto's state: %s", resp.Status)
	}
	var state struct {
		SES struct {
			Message []struct {
				ID           string `json:"id"`
				Source       string `json:"source"`
				Subject      string `json:"subject"`
				Body         string `json:"body"`
				Destinations struct {
					ToAddresses []string `json:"ToAddresses"`
				} `json:"destinations"`
			} `json:"Message"`
		} `json:"ses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&state); err != nil {
		return nil, fmt.Errorf("phone: moto's state: %w", err)
	}
	out := make([]Email, 0, len(state.SES.Message))
	for _, m := range state.SES.Message {
		out = append(out, Email{ID: m.ID, From: m.Source, To: m.Destinations.ToAddresses, Subject: m.Subject, Body: m.Body})
	}
	return out, nil
}
