package preflight

import (
	"context"
	"testing"
)

func TestCognitoDomain(t *testing.T) {
	const cert = "oncepay:albCertificateArn=arn:aws:acm:us-east-1:123456789012:certificate/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
	host := HostedUIDomain("oncepay-pay", "us-east-1")
	for _, tc := range []struct {
		name     string
		context  []string
		domains  map[string]string
		hosts    map[string]string
		status   Status
		contains []string
	}{
		{"taken by another account", []string{cert, "oncepay:albCognitoDomainPrefix=oncepay-pay"},
			map[string]string{"oncepay-pay": "cognito/describe-user-pool-domain-none.json"},
			map[string]string{host: "dns/resolves.json"},
			Fail, []string{"taken in us-east-1 by another account", host + " resolves", "-c oncepay:albCognitoDomainPrefix"}},
		{"free", []string{cert, "oncepay:albCognitoDomainPrefix=oncepay-pay"},
			map[string]string{"oncepay-pay": "cognito/describe-user-pool-domain-none.json"},
			map[string]string{host: "dns/nxdomain.json"},
			OK, []string{"free in us-east-1"}},
		{"held by a pool of this account: DNS is not asked", []string{cert, "oncepay:albCognitoDomainPrefix=oncepay-pay"},
			map[string]string{"oncepay-pay": "cognito/describe-user-pool-domain-own.json"}, nil,
			Warn, []string{"us-east-1_Ab12CdE3f", "123456789012", "redeploy"}},
		{"DNS cannot answer", []string{cert, "oncepay:albCognitoDomainPrefix=oncepay-pay"},
			map[string]string{"oncepay-pay": "cognito/describe-user-pool-domain-none.json"},
			map[string]string{host: "dns/servfail.json"},
			Warn, []string{"could not tell", "server misbehaving"}},
		{"a reserved word is refused before any call", []string{cert, "oncepay:albCognitoDomainPrefix=my-cognito-login"}, nil, nil,
			Fail, []string{`contains "cognito"`}},
		{"not a prefix", []string{cert, "oncepay:albCognitoDomainPrefix=Pay_Here"}, nil, nil,
			Fail, []string{"not a valid prefix"}},
		{"no ALB: the prefix is not used", []string{"oncepay:albCognitoDomainPrefix=oncepay-pay"}, nil, nil,
			OK, []string{"unused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorded{t: t, domains: tc.domains, hosts: tc.hosts}
			expect(t, checkCognitoDomain(context.Background(), r, r, "us-east-1", settings(t, tc.context...)), tc.status, tc.contains...)
		})
	}
}
