package provision

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// ProvisionSecrets creates the template's AWS::SecretsManager::Secret
// resources in Secrets Manager (moto), each named by its logical id after
// p.SecretPrefix, with the value its GenerateSecretString asks for; a secret
// that already exists keeps its value, as CloudFormation keeps it across
// updates. Then each AWS::SecretsManager::SecretTargetAttachment adds its DB
// cluster's connection fields (engine, host, port, dbClusterIdentifier, and
// dbname when the secret has none), the cluster being the local PostgreSQL
// (LocalClusters, already in phys). It adds the secrets and attachments to
// phys.
func (p *Provisioner) ProvisionSecrets(ctx context.Context, t *Template, phys map[string]Physical) error {
	if p.Secrets == nil {
		return errors.New("localcloud: the provisioner has no Secrets Manager client")
	}
	for _, id := range t.OfType("AWS::SecretsManager::Secret") {
		ph, err := p.secret(ctx, id, t.Resources[id].Properties)
		if err != nil {
			return err
		}
		phys[id] = ph
	}
	for _, id := range t.OfType("AWS::SecretsManager::SecretTargetAttachment") {
		ph, err := p.attach(ctx, id, t.Resources[id].Properties, phys)
		if err != nil {
			return err
		}
		phys[id] = ph
	}
	return nil
}

func (p *Provisioner) secret(ctx context.Context, id string, props map[string]any) (Physical, error) {
	name := str(props, "Name")
	if name == "" {
		name = p.SecretPrefix + id
	}
	desc, err := p.Secrets.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: &name})
	var nf *smtypes.ResourceNotFoundException
	switch {
	case err == nil:
		return Physical{Type: "AWS::SecretsManager::Secret", Name: name, Arn: aws.ToString(desc.ARN)}, nil
	case !errors.As(err, &nf):
		return Physical{}, fmt.Errorf("localcloud: describe secret %s: %w", name, err)
	}
	value, err := secretValue(id, props)
	if err != nil {
		return Physical{}, err
	}
	out, err := p.Secrets.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: &name, SecretString: &value,
		Description: aws.String("local stand-in for " + id)})
	if err != nil {
		return Physical{}, fmt.Errorf("localcloud: create secret %s: %w", name, err)
	}
	p.logf("secret %s created", name)
	return Physical{Type: "AWS::SecretsManager::Secret", Name: name, Arn: aws.ToString(out.ARN)}, nil
}

// generateSpec is AWS::SecretsManager::Secret's GenerateSecretString.
type generateSpec struct {
	SecretStringTemplate    string
	GenerateStringKey       string
	PasswordLength          *int
	ExcludeCharacters       string
	ExcludeLowercase        bool
	ExcludeUppercase        bool
	ExcludeNumbers          bool
	ExcludePunctuation      bool
	IncludeSpace            bool
	RequireEachIncludedType *bool
}

// secretValue is the value CloudFormation would create the secret with.
func secretValue(id string, props map[string]any) (string, error) {
	if s, ok := props["SecretString"].(string); ok {
		return s, nil
	}
	if _, ok := props["SecretString"]; ok {
		return "", fmt.Errorf("%w: secret %s: a SecretString built with intrinsics", ErrUnresolvable, id)
	}
	var g generateSpec
	if raw, ok := props["GenerateSecretString"]; ok {
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &g); err != nil {
			return "", fmt.Errorf("localcloud: secret %s: GenerateSecretString: %w", id, err)
		}
	}
	pw, err := g.password()
	if err != nil {
		return "", fmt.Errorf("localcloud: secret %s: %w", id, err)
	}
	if g.SecretStringTemplate == "" {
		return pw, nil
	}
	var tmpl map[string]any
	if err := json.Unmarshal([]byte(g.SecretStringTemplate), &tmpl); err != nil {
		return "", fmt.Errorf("localcloud: secret %s: SecretStringTemplate is not a JSON object: %w", id, err)
	}
	if g.GenerateStringKey == "" {
		return "", fmt.Errorf("localcloud: secret %s: SecretStringTemplate without GenerateStringKey", id)
	}
	tmpl[g.GenerateStringKey] = pw
	b, err := json.Marshal(tmpl)
	return string(b), err
}

const punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// password draws a password the way Secrets Manager's GetRandomPassword
// does: 32 characters by default, from the classes not excluded, with at
// least one of each (RequireEachIncludedType defaults to true).
func (g generateSpec) password() (string, error) {
	length := 32
	if g.PasswordLength != nil {
		length = *g.PasswordLength
	}
	var classes []string
	add := func(excluded bool, chars string) {
		if excluded {
			return
		}
		var kept strings.Builder
		for _, c := range chars {
			if !strings.ContainsRune(g.ExcludeCharacters, c) {
				kept.WriteRune(c)
			}
		}
		if kept.Len() > 0 {
			classes = append(classes, kept.String())
		}
	}
	add(g.ExcludeLowercase, "abcdefghijklmnopqrstuvwxyz")
	add(g.ExcludeUppercase, "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
	add(g.ExcludeNumbers, "0123456789")
	add(g.ExcludePunctuation, punctuation)
	add(!g.IncludeSpace, " ")
	all := strings.Join(classes, "")
	if all == "" || length < 1 || length > 4096 {
		return "", fmt.Errorf("GenerateSecretString leaves no characters or a length of %d", length)
	}
	requireEach := g.RequireEachIncludedType == nil || *g.RequireEachIncludedType
	for range 1000 {
		b := make([]byte, length)
		for i := range b {
			n, err := rand.Int(rand.Reader, big.NewInt(int64(len(all))))
			if err != nil {
				return "", err
			}
			b[i] = all[n.Int64()]
		}
		pw := string(b)
		if !requireEach || length < len(classes) || eachClass(pw, classes) {
			return pw, nil
		}
	}
	return "", errors.New("GenerateSecretString: no password with every character class")
}

func eachClass(pw string, classes []string) bool {
	for _, c := range classes {
		if !strings.ContainsAny(pw, c) {
			return false
		}
	}
	return true
}

func (p *Provisioner) attach(ctx context.Context, id string, props map[string]any, phys map[string]Physical) (Physical, error) {
	secretID, _, _ := Ref(props["SecretId"])
	targetID, _, _ := Ref(props["TargetId"])
	sec, ok := phys[secretID]
	if !ok || sec.Type != "AWS::SecretsManager::Secret" {
		return Physical{}, fmt.Errorf("%w: attachment %s: SecretId %v is not a secret of this template", ErrUnresolvable, id, props["SecretId"])
	}
	target, ok := phys[targetID]
	if !ok || target.Type != "AWS::RDS::DBCluster" || str(props, "TargetType") != "AWS::RDS::DBCluster" {
		return Physical{}, fmt.Errorf("%w: attachment %s: target %v (%s) is not a DB cluster the local cloud runs", ErrUnresolvable, id, props["TargetId"], str(props, "TargetType"))
	}
	got, err := p.Secrets.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: &sec.Arn})
	if err != nil {
		return Physical{}, fmt.Errorf("localcloud: read secret %s: %w", sec.Name, err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(aws.ToString(got.SecretString)), &v); err != nil {
		return Physical{}, fmt.Errorf("localcloud: attachment %s: secret %s is not a JSON object: %w", id, sec.Name, err)
	}
	port, _ := strconv.Atoi(target.Port)
	want := map[string]any{}
	for k, val := range v {
		want[k] = val
	}
	// What the attachment writes for an Aurora PostgreSQL cluster; the port
	// is a number in RDS's secret shape.
	want["engine"] = "postgres"
	want["host"] = target.Address
	want["port"] = float64(port)
	want["dbClusterIdentifier"] = target.Name
	if _, has := want["dbname"]; !has && target.Database != "" {
		want["dbname"] = target.Database
	}
	if !reflect.DeepEqual(v, want) {
		b, _ := json.Marshal(want)
		if _, err := p.Secrets.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &sec.Arn, SecretString: aws.String(string(b))}); err != nil {
			return Physical{}, fmt.Errorf("localcloud: attachment %s: write secret %s: %w", id, sec.Name, err)
		}
		p.logf("secret %s: attached to %s at %s:%s", sec.Name, target.Name, target.Address, target.Port)
	}
	return Physical{Type: "AWS::SecretsManager::SecretTargetAttachment", Name: sec.Name, Arn: sec.Arn}, nil
}
