package sesclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	sestypes "github.com/aws/aws-sdk-go-v2/service/sesv2/types"

	"github.com/oncepay/oncepay/internal/awsclient/sesclient"
)

// A send SES answers 500 is made once: the SDK does not retry it (a second
// email no one would count), the caller hears the error.
func TestASendIsAttemptedOnce(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-ErrorType", "InternalFailure")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"message":"try again"}`))
	}))
	defer srv.Close()
	c := sesclient.NewSender(aws.Config{Region: "us-east-1", Credentials: aws.AnonymousCredentials{}, BaseEndpoint: aws.String(srv.URL)})
	_, err := c.SendEmail(context.Background(), &sesv2.SendEmailInput{
		FromEmailAddress: aws.String("a@example.com"),
		Destination:      &sestypes.Destination{ToAddresses: []string{"b@example.com"}},
		Content:          &sestypes.EmailContent{Simple: &sestypes.Message{Subject: &sestypes.Content{Data: aws.String("s")}, Body: &sestypes.Body{Text: &sestypes.Content{Data: aws.String("b")}}}},
	})
	if err == nil || calls.Load() != 1 {
		t.Fatalf("%d calls (want 1), err %v", calls.Load(), err)
	}
}
