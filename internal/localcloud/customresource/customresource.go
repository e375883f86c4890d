// Package customresource plays CloudFormation's side of the template's
// custom resources on the local cloud: for each Custom::* resource (or
// AWS::CloudFormation::CustomResource) whose ServiceToken is a function of
// the template, it sends the request CloudFormation would send — Create when
// the local cloud has no record of the resource, Update when its resolved
// properties differ from the recorded ones (the migration resource carries
// its function's Version, so a changed function is an Update), nothing when
// they are the same — through invoke.Invoker, waits for the function's PUT
// of the response to the request's ResponseURL (an endpoint the driver
// serves on 127.0.0.1), and records the physical id, properties and data
// under the state dir. A FAILED response is an error carrying its Reason,
// and nothing is recorded, so the next run tries Create (or Update) again,
// as a rolled-back stack would.
//
// Left out: Delete (the local cloud never deletes the stack's resources; a
// resource removed from the template keeps its record), the Delete
// CloudFormation sends for the old physical id when an Update returns a new
// one (logged), and SNS-backed service tokens.
package customresource

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/cfn"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
)

// StateFile holds the records, under the state dir (.local).
const StateFile = "customresources.json"

// Record is what the local cloud remembers of a custom resource, as
// CloudFormation does in the stack.
type Record struct {
	Type               string         `json:"Type"`
	PhysicalResourceID string         `json:"PhysicalResourceId"`
	Properties         map[string]any `json:"Properties"`
	Data               map[string]any `json:"Data,omitempty"`
}

// Outcome is what Run did for one resource.
type Outcome struct {
	LogicalID string
	// Request is "Create" or "Update", empty when the resource was unchanged.
	Request    cfn.RequestType
	PhysicalID string
	Data       map[string]any
}

// Driver runs the template's custom resources.
type Driver struct {
	Invoker invoke.Invoker
	// Evaluator resolves the resources' properties (its Template is the
	// template run, its Physical the local cloud's resources).
	Evaluator *provision.Evaluator
	StateDir  string
	Log       *slog.Logger // nil: slog.Default()
}

// DefaultTimeout is how long CloudFormation waits for a response when the
// resource sets no ServiceTimeout.
const DefaultTimeout = time.Hour

// Run sends each custom resource the request its change calls for, in
// logical-id order, and blocks until each is answered. It stops at the first
// failure.
func (d *Driver) Run(ctx context.Context) ([]Outcome, error) {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("scope", "customresource")
	t := d.Evaluator.Template
	var ids []string
	for id, r := range t.Resources {
		if strings.HasPrefix(r.Type, "Custom::") || r.Type == "AWS::CloudFormation::CustomResource" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	records, err := ReadRecords(d.StateDir)
	if err != nil {
		return nil, err
	}
	srv, err := listen()
	if err != nil {
		return nil, err
	}
	defer srv.close()

	var outcomes []Outcome
	for _, id := range ids {
		r := t.Resources[id]
		props, err := d.Evaluator.Properties(ctx, r.Properties)
		if err != nil {
			return outcomes, fmt.Errorf("customresource: %s: %w", id, err)
		}
		rec, had := records[id]
		if had && reflect.DeepEqual(rec.Properties, props) {
			log.Info("custom resource unchanged", "logical_id", id, "physical_id", rec.PhysicalResourceID)
			outcomes = append(outcomes, Outcome{LogicalID: id, PhysicalID: rec.PhysicalResourceID, Data: rec.Data})
			continue
		}
		fn, err := d.function(props["ServiceToken"])
		if err != nil {
			return outcomes, fmt.Errorf("customresource: %s: %w", id, err)
		}
		ev := cfn.Event{
			RequestType:        cfn.RequestCreate,
			RequestID:          newUUID(),
			ResourceType:       r.Type,
			LogicalResourceID:  id,
			StackID:            d.Evaluator.StackID(),
			ResourceProperties: props,
		}
		if had {
			ev.RequestType = cfn.RequestUpdate
			ev.PhysicalResourceID = rec.PhysicalResourceID
			ev.OldResourceProperties = rec.Properties
		}
		ev.ResponseURL = srv.url + "/" + ev.RequestID
		log.Info("custom resource request", "logical_id", id, "request", string(ev.RequestType), "function", fn)
		resp, err := d.send(ctx, srv, fn, ev, timeout(props))
		if err != nil {
			return outcomes, fmt.Errorf("customresource: %s %s: %w", ev.RequestType, id, err)
		}
		if resp.Status != cfn.StatusSuccess {
			return outcomes, fmt.Errorf("customresource: %s %s failed: %s", ev.RequestType, id, resp.Reason)
		}
		if had && resp.PhysicalResourceID != rec.PhysicalResourceID {
			log.Warn("update replaced the physical id; the local cloud sends no Delete for the old one",
				"logical_id", id, "old", rec.PhysicalResourceID, "new", resp.PhysicalResourceID)
		}
		records[id] = Record{Type: r.Type, PhysicalResourceID: resp.PhysicalResourceID, Properties: props, Data: resp.Data}
		if err := writeRecords(d.StateDir, records); err != nil {
			return outcomes, err
		}
		log.Info("custom resource done", "logical_id", id, "request", string(ev.RequestType), "physical_id", resp.PhysicalResourceID)
		outcomes = append(outcomes, Outcome{LogicalID: id, Request: ev.RequestType, PhysicalID: resp.PhysicalResourceID, Data: resp.Data})
	}
	return outcomes, nil
}

// function maps a ServiceToken to the logical id of the template function
// whose ARN (or a version's ARN) it is.
func (d *Driver) function(token any) (string, error) {
	arn, _ := token.(string)
	for id, ph := range d.Evaluator.Physical {
		if ph.Type == "AWS::Lambda::Function" && (arn == ph.Arn || strings.HasPrefix(arn, ph.Arn+":")) {
			return id, nil
		}
	}
	return "", fmt.Errorf("ServiceToken %v is not a function of the template (the local cloud runs only Lambda-backed custom resources)", token)
}

func timeout(props map[string]any) time.Duration {
	if s, ok := props["ServiceTimeout"].(string); ok {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return time.Duration(n) * time.Second
		}
	}
	return DefaultTimeout
}

// send invokes fn with ev and waits for the response PUT, and for the
// invocation to end: the PUT is the handler's last act, and cutting the
// invocation short (or starting the next request while it still holds its
// execution environment) would be the driver's doing, not the function's.
// An invocation that fails before any PUT is the error (CloudFormation
// would wait out the timeout).
func (d *Driver) send(ctx context.Context, srv *server, fn string, ev cfn.Event, wait time.Duration) (cfn.Response, error) {
	payload, err := json.Marshal(ev)
	if err != nil {
		return cfn.Response{}, err
	}
	got := srv.expect(ev.RequestID)
	defer srv.forget(ev.RequestID)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	invoked := make(chan error, 1)
	go func() {
		_, err := d.Invoker.Invoke(ctx, fn, payload)
		invoked <- err
	}()
	for {
		select {
		case resp := <-got:
			if invoked != nil {
				select {
				case <-invoked: // its answer adds nothing to the response
				case <-ctx.Done():
				}
			}
			return resp, nil
		case err := <-invoked:
			if err != nil {
				select {
				case resp := <-got:
					return resp, nil
				default:
				}
				return cfn.Response{}, fmt.Errorf("invoke %s: %w", fn, err)
			}
			invoked = nil // answered without error: keep waiting for the PUT
		case <-ctx.Done():
			return cfn.Response{}, fmt.Errorf("no response from %s at the ResponseURL within %s: %w", fn, wait, ctx.Err())
		}
	}
}

// server receives the response PUTs, one request id each.
type server struct {
	url     string
	srv     *http.Server
	mu      sync.Mutex
	pending map[string]chan cfn.Response
}

func listen() (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("customresource: response endpoint: %w", err)
	}
	s := &server{url: "http://" + ln.Addr().String(), pending: map[string]chan cfn.Response{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *server) close() { _ = s.srv.Close() }

func (s *server) expect(id string) <-chan cfn.Response {
	ch := make(chan cfn.Response, 1)
	s.mu.Lock()
	s.pending[id] = ch
	s.mu.Unlock()
	return ch
}

func (s *server) forget(id string) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}

// ServeHTTP takes CloudFormation's side of the pre-signed S3 URL: a PUT of
// the response JSON.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, "a custom resource response is a PUT", http.StatusMethodNotAllowed)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/")
	s.mu.Lock()
	ch, ok := s.pending[id]
	s.mu.Unlock()
	if !ok {
		http.Error(w, "no request "+id+" is waiting", http.StatusNotFound)
		return
	}
	var resp cfn.Response
	if err := json.NewDecoder(r.Body).Decode(&resp); err != nil {
		http.Error(w, "response is not JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	if resp.RequestID != id || (resp.Status != cfn.StatusSuccess && resp.Status != cfn.StatusFailed) || resp.PhysicalResourceID == "" {
		// CloudFormation fails the resource on a malformed response; so do we.
		resp = cfn.Response{Status: cfn.StatusFailed, RequestID: id,
			Reason: fmt.Sprintf("malformed response (RequestId %q, Status %q, PhysicalResourceId %q)", resp.RequestID, resp.Status, resp.PhysicalResourceID)}
	}
	select {
	case ch <- resp:
	default: // a second PUT for the same request: the first one counts
	}
	w.WriteHeader(http.StatusOK)
}

// ReadRecords loads the records (none on a fresh local cloud).
func ReadRecords(stateDir string) (map[string]Record, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]Record{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("customresource: %w", err)
	}
	recs := map[string]Record{}
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("customresource: %s: %w", StateFile, err)
	}
	return recs, nil
}

// writeRecords saves the records 0600: resolved properties may hold secrets.
func writeRecords(stateDir string, recs map[string]Record) error {
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	return localenv.WriteFile(filepath.Join(stateDir, StateFile), append(b, '\n'))
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
