package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Physical is what a logical resource became in the local cloud.
type Physical struct {
	Type      string
	Name      string
	Arn       string
	URL       string // queues
	StreamArn string // tables with a stream
	// Address and Port are a DB cluster's endpoint (the local PostgreSQL).
	Address string `json:",omitempty"`
	Port    string `json:",omitempty"`
	// Database is a DB cluster's DatabaseName.
	Database string `json:",omitempty"`
	// Version is a Lambda version's number, as PublishVersion gave it.
	Version string `json:",omitempty"`
}

// Provisioner creates the template's resources in the emulators.
type Provisioner struct {
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
	SNS      *sns.Client
	Secrets  *secretsmanager.Client // ProvisionSecrets
	// Region is the Region DynamoDB is in (a global table must have a
	// replica there).
	Region string
	// Replicas are the other Regions' DynamoDB clients by Region: a
	// global table's replica in each is made there too, as CloudFormation
	// makes every replica from the primary's stack; a replica Region with
	// no client here is an error.
	Replicas map[string]*dynamodb.Client
	// SecretPrefix goes before a secret's logical id in its local name
	// (tests give their own, so they never touch the local cloud's).
	SecretPrefix string
	Log          io.Writer // progress lines; nil for none
}

func (p *Provisioner) logf(format string, args ...any) {
	if p.Log != nil {
		fmt.Fprintf(p.Log, "localcloud: "+format+"\n", args...)
	}
}

// Provision creates or updates every supported resource of t and returns the
// physical resources by logical id. Running it twice changes nothing.
func (p *Provisioner) Provision(ctx context.Context, t *Template) (map[string]Physical, error) {
	phys := map[string]Physical{}
	for _, id := range t.OfType("AWS::DynamoDB::Table") {
		ph, err := p.table(ctx, id, t.Resources[id].Properties)
		if err != nil {
			return nil, err
		}
		phys[id] = ph
	}
	for _, id := range t.OfType("AWS::DynamoDB::GlobalTable") {
		ph, err := p.globalTable(ctx, id, t.Resources[id].Properties)
		if err != nil {
			return nil, err
		}
		phys[id] = ph
	}
	// Dead-letter queues first: a redrive policy names its target's ARN.
	queues := t.OfType("AWS::SQS::Queue")
	sort.SliceStable(queues, func(i, j int) bool {
		_, ri := t.Resources[queues[i]].Properties["RedrivePolicy"]
		_, rj := t.Resources[queues[j]].Properties["RedrivePolicy"]
		return !ri && rj
	})
	for _, id := range queues {
		ph, err := p.queue(ctx, id, t.Resources[id].Properties, phys)
		if err != nil {
			return nil, err
		}
		phys[id] = ph
	}
	for _, id := range t.OfType("AWS::SNS::Topic") {
		ph, err := p.topic(ctx, id, t.Resources[id].Properties)
		if err != nil {
			return nil, err
		}
		phys[id] = ph
	}
	return phys, nil
}

// tableSpec is the subset of AWS::DynamoDB::Table properties the local table mirrors.
type tableSpec struct {
	KeySchema            []ddbtypes.KeySchemaElement      `json:"KeySchema"`
	AttributeDefinitions []ddbtypes.AttributeDefinition   `json:"AttributeDefinitions"`
	StreamSpecification  *struct{ StreamViewType string } `json:"StreamSpecification"`
	TimeToLive           *struct {
		AttributeName string
		Enabled       bool
	} `json:"TimeToLiveSpecification"`
	GlobalSecondaryIndexes []indexSpec `json:"GlobalSecondaryIndexes"`
	LocalSecondaryIndexes  []indexSpec `json:"LocalSecondaryIndexes"`
}

// indexSpec is a secondary index as the template declares it.
type indexSpec struct {
	IndexName  string
	KeySchema  []ddbtypes.KeySchemaElement
	Projection struct {
		ProjectionType   string
		NonKeyAttributes []string
	}
}

func (i indexSpec) projection() *ddbtypes.Projection {
	return &ddbtypes.Projection{
		ProjectionType:   ddbtypes.ProjectionType(i.Projection.ProjectionType),
		NonKeyAttributes: i.Projection.NonKeyAttributes,
	}
}

func decode(props map[string]any, out any) error {
	b, err := json.Marshal(props)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// globalTable makes an AWS::DynamoDB::GlobalTable's replica in this
// Region's DynamoDB Local and in each other replica Region's (p.Replicas),
// each with the stream of new and old images every global table has (it is
// what replication reads; internal/localcloud/globaltable copies between
// them). It refuses what CloudFormation refuses or the local cloud does not
// play: no name, no such stream, this Region not among the replicas, a
// replica Region it cannot reach, strong multi-Region consistency. The
// replicas' own settings (PITR, deletion protection, keys) have no local
// meaning.
func (p *Provisioner) globalTable(ctx context.Context, id string, props map[string]any) (Physical, error) {
	var spec struct {
		TableName              string
		MultiRegionConsistency string
		StreamSpecification    *struct{ StreamViewType string }
		Replicas               []struct{ Region string }
	}
	if err := decode(props, &spec); err != nil {
		return Physical{}, fmt.Errorf("localcloud: global table %s: %w", id, err)
	}
	switch {
	case spec.TableName == "":
		return Physical{}, fmt.Errorf("localcloud: global table %s has no TableName (every replica has the one name)", id)
	case spec.StreamSpecification == nil || spec.StreamSpecification.StreamViewType != string(ddbtypes.StreamViewTypeNewAndOldImages):
		return Physical{}, fmt.Errorf("localcloud: global table %s: StreamSpecification %+v, want NEW_AND_OLD_IMAGES (CloudFormation requires it with more than one replica)", id, spec.StreamSpecification)
	case spec.MultiRegionConsistency != "" && spec.MultiRegionConsistency != "EVENTUAL":
		return Physical{}, fmt.Errorf("localcloud: global table %s: MultiRegionConsistency %s is not played by the local cloud's stacks (the in-process Region tests play it)", id, spec.MultiRegionConsistency)
	}
	local := map[string]any{}
	for k, v := range props {
		if k != "Replicas" {
			local[k] = v
		}
	}
	here := false
	for _, r := range spec.Replicas {
		if r.Region == p.Region {
			here = true
			continue
		}
		db, ok := p.Replicas[r.Region]
		if !ok {
			return Physical{}, fmt.Errorf("localcloud: global table %s: no DynamoDB Local for its replica in %s (localcloud up -replica-dynamodb)", id, r.Region)
		}
		other := *p
		other.DynamoDB, other.Replicas = db, nil
		if _, err := other.table(ctx, id, local); err != nil {
			return Physical{}, fmt.Errorf("replica in %s: %w", r.Region, err)
		}
		p.logf("global table %s: replica in %s", spec.TableName, r.Region)
	}
	if !here {
		return Physical{}, fmt.Errorf("localcloud: global table %s has no replica in its stack's Region %s", id, p.Region)
	}
	ph, err := p.table(ctx, id, local)
	if err != nil {
		return Physical{}, err
	}
	ph.Type = "AWS::DynamoDB::GlobalTable"
	return ph, nil
}

func (p *Provisioner) table(ctx context.Context, id string, props map[string]any) (Physical, error) {
	name := str(props, "TableName")
	if name == "" {
		name = id
	}
	var spec tableSpec
	if err := decode(props, &spec); err != nil {
		return Physical{}, fmt.Errorf("localcloud: table %s: %w", id, err)
	}
	desc, err := p.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
	var nf *ddbtypes.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		desc = nil
	case err != nil:
		return Physical{}, fmt.Errorf("localcloud: describe table %s: %w", name, err)
	}
	if desc != nil && !sameKeys(desc.Table.KeySchema, spec.KeySchema) {
		p.logf("table %s: key schema changed in the template; recreating", name)
		if _, err := p.DynamoDB.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
			return Physical{}, fmt.Errorf("localcloud: delete table %s: %w", name, err)
		}
		desc = nil
	}
	if desc == nil {
		in := &dynamodb.CreateTableInput{
			TableName:            &name,
			KeySchema:            spec.KeySchema,
			AttributeDefinitions: spec.AttributeDefinitions,
			BillingMode:          ddbtypes.BillingModePayPerRequest,
		}
		if spec.StreamSpecification != nil {
			in.StreamSpecification = &ddbtypes.StreamSpecification{
				StreamEnabled:  aws.Bool(true),
				StreamViewType: ddbtypes.StreamViewType(spec.StreamSpecification.StreamViewType),
			}
		}
		for _, g := range spec.GlobalSecondaryIndexes {
			in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, ddbtypes.GlobalSecondaryIndex{
				IndexName: aws.String(g.IndexName), KeySchema: g.KeySchema, Projection: g.projection(),
			})
		}
		for _, l := range spec.LocalSecondaryIndexes {
			in.LocalSecondaryIndexes = append(in.LocalSecondaryIndexes, ddbtypes.LocalSecondaryIndex{
				IndexName: aws.String(l.IndexName), KeySchema: l.KeySchema, Projection: l.projection(),
			})
		}
		if _, err := p.DynamoDB.CreateTable(ctx, in); err != nil {
			return Physical{}, fmt.Errorf("localcloud: create table %s: %w", name, err)
		}
		p.logf("table %s created", name)
		desc, err = p.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
		if err != nil {
			return Physical{}, fmt.Errorf("localcloud: describe table %s: %w", name, err)
		}
	} else if spec.StreamSpecification != nil && (desc.Table.StreamSpecification == nil || !aws.ToBool(desc.Table.StreamSpecification.StreamEnabled)) {
		_, err := p.DynamoDB.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName: &name,
			StreamSpecification: &ddbtypes.StreamSpecification{
				StreamEnabled:  aws.Bool(true),
				StreamViewType: ddbtypes.StreamViewType(spec.StreamSpecification.StreamViewType),
			},
		})
		if err != nil {
			return Physical{}, fmt.Errorf("localcloud: enable stream on %s: %w", name, err)
		}
		if desc, err = p.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name}); err != nil {
			return Physical{}, fmt.Errorf("localcloud: describe table %s: %w", name, err)
		}
	}
	if spec.TimeToLive != nil && spec.TimeToLive.Enabled {
		ttl, err := p.DynamoDB.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &name})
		if err != nil {
			return Physical{}, fmt.Errorf("localcloud: describe ttl %s: %w", name, err)
		}
		d := ttl.TimeToLiveDescription
		if d == nil || d.TimeToLiveStatus != ddbtypes.TimeToLiveStatusEnabled || aws.ToString(d.AttributeName) != spec.TimeToLive.AttributeName {
			_, err := p.DynamoDB.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
				TableName: &name,
				TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{
					AttributeName: aws.String(spec.TimeToLive.AttributeName),
					Enabled:       aws.Bool(true),
				},
			})
			if err != nil {
				return Physical{}, fmt.Errorf("localcloud: enable ttl on %s: %w", name, err)
			}
		}
	}
	return Physical{
		Type:      "AWS::DynamoDB::Table",
		Name:      name,
		Arn:       aws.ToString(desc.Table.TableArn),
		StreamArn: aws.ToString(desc.Table.LatestStreamArn),
	}, nil
}

func sameKeys(a, b []ddbtypes.KeySchemaElement) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if aws.ToString(a[i].AttributeName) != aws.ToString(b[i].AttributeName) || a[i].KeyType != b[i].KeyType {
			return false
		}
	}
	return true
}

// queueAttrs lists the AWS::SQS::Queue properties that are queue attributes of the same name.
var queueAttrs = []string{
	"ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit", "DelaySeconds",
	"MaximumMessageSize", "MessageRetentionPeriod", "ReceiveMessageWaitTimeSeconds", "VisibilityTimeout",
}

func (p *Provisioner) queue(ctx context.Context, id string, props map[string]any, phys map[string]Physical) (Physical, error) {
	fifo := boolProp(props, "FifoQueue")
	name := str(props, "QueueName")
	if name == "" {
		name = id
		if fifo {
			name += ".fifo"
		}
	}
	attrs := map[string]string{}
	for _, k := range queueAttrs {
		switch v := props[k].(type) {
		case bool:
			attrs[k] = fmt.Sprint(v)
		case float64:
			attrs[k] = fmt.Sprintf("%d", int64(v))
		case string:
			attrs[k] = v
		}
	}
	if rp, ok := props["RedrivePolicy"].(map[string]any); ok {
		target, _, ok := Ref(rp["deadLetterTargetArn"])
		dlq, known := phys[target]
		if !ok || !known {
			return Physical{}, fmt.Errorf("localcloud: queue %s: redrive target %v is not a queue of this template", id, rp["deadLetterTargetArn"])
		}
		b, err := json.Marshal(map[string]any{"deadLetterTargetArn": dlq.Arn, "maxReceiveCount": rp["maxReceiveCount"]})
		if err != nil {
			return Physical{}, err
		}
		attrs["RedrivePolicy"] = string(b)
	}
	var url string
	got, err := p.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name})
	var missing *sqstypes.QueueDoesNotExist
	switch {
	case errors.As(err, &missing):
		create := map[string]string{}
		for k, v := range attrs {
			create[k] = v
		}
		if fifo {
			create["FifoQueue"] = "true"
		}
		out, err := p.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: create})
		if err != nil {
			return Physical{}, fmt.Errorf("localcloud: create queue %s: %w", name, err)
		}
		url = aws.ToString(out.QueueUrl)
		p.logf("queue %s created", name)
	case err != nil:
		return Physical{}, fmt.Errorf("localcloud: get queue %s: %w", name, err)
	default:
		url = aws.ToString(got.QueueUrl)
		if len(attrs) > 0 {
			if _, err := p.SQS.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url, Attributes: attrs}); err != nil {
				return Physical{}, fmt.Errorf("localcloud: set attributes of %s: %w", name, err)
			}
		}
	}
	qa, err := p.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: &url, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return Physical{}, fmt.Errorf("localcloud: queue arn of %s: %w", name, err)
	}
	return Physical{Type: "AWS::SQS::Queue", Name: name, URL: url, Arn: qa.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]}, nil
}

func (p *Provisioner) topic(ctx context.Context, id string, props map[string]any) (Physical, error) {
	name := str(props, "TopicName")
	attrs := map[string]string{}
	if boolProp(props, "FifoTopic") {
		attrs["FifoTopic"] = "true"
		if boolProp(props, "ContentBasedDeduplication") {
			attrs["ContentBasedDeduplication"] = "true"
		}
	}
	if name == "" {
		name = id
		if attrs["FifoTopic"] == "true" {
			name += ".fifo"
		}
	}
	out, err := p.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: &name, Attributes: attrs})
	if err != nil {
		return Physical{}, fmt.Errorf("localcloud: create topic %s: %w", name, err)
	}
	return Physical{Type: "AWS::SNS::Topic", Name: name, Arn: aws.ToString(out.TopicArn)}, nil
}

// Outputs resolves each stack output that is a Ref or Fn::GetAtt of a
// provisioned resource. Outputs of resources the local cloud does not run
// (Aurora, its secret) are left out; the caller supplies local stand-ins.
func Outputs(t *Template, phys map[string]Physical) map[string]string {
	out := map[string]string{}
	for name, o := range t.Outputs {
		id, attr, ok := Ref(o.Value)
		if !ok {
			if s, isStr := o.Value.(string); isStr {
				out[name] = s
			}
			continue
		}
		ph, known := phys[id]
		if !known {
			continue
		}
		if v := attribute(ph, attr); v != "" {
			out[name] = v
		}
	}
	return out
}

func attribute(ph Physical, attr string) string {
	switch ph.Type {
	case "AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable":
		switch attr {
		case "":
			return ph.Name
		case "Arn":
			return ph.Arn
		case "StreamArn":
			return ph.StreamArn
		}
	case "AWS::SQS::Queue":
		switch attr {
		case "", "QueueUrl":
			return ph.URL
		case "Arn":
			return ph.Arn
		case "QueueName":
			return ph.Name
		}
	case "AWS::SNS::Topic":
		switch attr {
		case "", "TopicArn":
			return ph.Arn
		case "TopicName":
			return ph.Name
		}
	case "AWS::SecretsManager::Secret", "AWS::SecretsManager::SecretTargetAttachment":
		switch attr {
		case "", "Id":
			return ph.Arn
		}
	case "AWS::RDS::DBCluster":
		switch attr {
		case "":
			return ph.Name
		case "DBClusterArn":
			return ph.Arn
		case "Endpoint.Address", "ReadEndpoint.Address":
			return ph.Address
		case "Endpoint.Port":
			return ph.Port
		}
	case "AWS::Lambda::Function":
		switch attr {
		case "":
			return ph.Name
		case "Arn":
			return ph.Arn
		}
	case "AWS::Lambda::Version":
		switch attr {
		case "":
			return ph.Arn
		case "Version":
			return ph.Version
		}
	}
	return ""
}

// Describe renders what the local cloud holds for the template's resources,
// with their key attributes, one line each.
func (p *Provisioner) Describe(ctx context.Context, phys map[string]Physical) (string, error) {
	ids := make([]string, 0, len(phys))
	for id := range phys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		ph := phys[id]
		switch ph.Type {
		case "AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable":
			d, err := p.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &ph.Name})
			if err != nil {
				return "", fmt.Errorf("localcloud: describe %s: %w", ph.Name, err)
			}
			ttl, err := p.DynamoDB.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &ph.Name})
			if err != nil {
				return "", fmt.Errorf("localcloud: describe ttl %s: %w", ph.Name, err)
			}
			var keys []string
			for _, k := range d.Table.KeySchema {
				keys = append(keys, aws.ToString(k.AttributeName)+"("+string(k.KeyType)+")")
			}
			stream := "none"
			if s := d.Table.StreamSpecification; s != nil && aws.ToBool(s.StreamEnabled) {
				stream = string(s.StreamViewType)
			}
			ttlAttr := "off"
			if t := ttl.TimeToLiveDescription; t != nil && t.TimeToLiveStatus == ddbtypes.TimeToLiveStatusEnabled {
				ttlAttr = aws.ToString(t.AttributeName)
			}
			fmt.Fprintf(&b, "dynamodb table  %-28s key=%s stream=%s ttl=%s\n", ph.Name, strings.Join(keys, ","), stream, ttlAttr)
		case "AWS::SQS::Queue":
			a, err := p.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
				QueueUrl: &ph.URL, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
			})
			if err != nil {
				return "", fmt.Errorf("localcloud: queue attributes %s: %w", ph.Name, err)
			}
			redrive := a.Attributes["RedrivePolicy"]
			if redrive == "" {
				redrive = "none"
			}
			fmt.Fprintf(&b, "sqs queue       %-28s fifo=%s content_dedup=%s visibility=%ss redrive=%s\n",
				ph.Name, orFalse(a.Attributes["FifoQueue"]), orFalse(a.Attributes["ContentBasedDeduplication"]),
				a.Attributes["VisibilityTimeout"], redrive)
		case "AWS::SNS::Topic":
			fmt.Fprintf(&b, "sns topic       %-28s arn=%s\n", ph.Name, ph.Arn)
		}
	}
	return b.String(), nil
}

func orFalse(s string) string {
	if s == "" {
		return "false"
	}
	return s
}
