package preflight

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider"
	cogtypes "github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider/types"
)

// prefixPattern is CreateUserPoolDomain's pattern for Domain.
var prefixPattern = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)

// reservedPrefixWords: Cognito refuses a prefix that contains one
// ("Domain cannot contain reserved word").
var reservedPrefixWords = []string{"aws", "amazon", "cognito"}

// HostedUIDomain is the name a prefix domain is served under in region
// (the commercial partition's).
func HostedUIDomain(prefix, region string) string {
	return prefix + ".auth." + region + ".amazoncognito.com"
}

// checkCognitoDomain checks that the ALB's hosted sign-in prefix is free in
// the Region. A prefix is unique per Region across all accounts, and
// DescribeUserPoolDomain answers for this account's domains only (an empty
// description otherwise), so it cannot see one another account holds. The
// domain's DNS name can: Cognito publishes <prefix>.auth.<region>.
// amazoncognito.com for every prefix domain, and a prefix nobody holds
// does not resolve (NXDOMAIN). So: this account's pool first (the name
// of the pool that holds it), then DNS for everyone else's.
func checkCognitoDomain(ctx context.Context, api CognitoAPI, dns Resolver, region string, s Settings) Result {
	const check = "cognito-domain"
	prefix := s.CognitoDomainPrefix
	if s.AlbCertificateArn == "" {
		return Result{Status: OK, Region: region, Check: check, Detail: fmt.Sprintf(
			"%s is set but unused: only the ALB front door (%s) creates the domain", KeyCognitoDomainPrefix, KeyAlbCertificateArn)}
	}
	choose := fmt.Sprintf("choose another -c %s (adding the account id makes a clash unlikely)", KeyCognitoDomainPrefix)
	if !prefixPattern.MatchString(prefix) {
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"%q is not a valid prefix (lower-case letters, digits and inner hyphens, at most 63): %s", prefix, choose)}
	}
	for _, w := range reservedPrefixWords {
		if strings.Contains(prefix, w) {
			return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
				"%q contains %q, a word Cognito reserves: %s", prefix, w, choose)}
		}
	}
	out, err := api.DescribeUserPoolDomain(ctx, &cognitoidentityprovider.DescribeUserPoolDomainInput{Domain: &prefix})
	var nf *cogtypes.ResourceNotFoundException
	if err != nil && !errors.As(err, &nf) {
		return couldNot(region, check, "cognito-idp:DescribeUserPoolDomain", err)
	}
	if err == nil && out.DomainDescription != nil && deref(out.DomainDescription.UserPoolId) != "" {
		d := out.DomainDescription
		return Result{Status: Warn, Region: region, Check: check, Detail: fmt.Sprintf(
			"%s is held by user pool %s (account %s): if that is this stack's pool (a redeploy), nothing to do; otherwise the deploy fails: %s",
			prefix, deref(d.UserPoolId), deref(d.AWSAccountId), choose)}
	}
	host := HostedUIDomain(prefix, region)
	addrs, err := dns.LookupHost(ctx, host)
	var dnsErr *net.DNSError
	switch {
	case err == nil && len(addrs) > 0:
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"%s is taken in %s by another account (%s resolves), and CloudFormation fails to create the domain: %s", prefix, region, host, choose)}
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return Result{Status: OK, Region: region, Check: check, Detail: fmt.Sprintf(
			"%s is free in %s (no pool of this account holds it; %s does not resolve)", prefix, region, host)}
	}
	return Result{Status: Warn, Region: region, Check: check, Detail: fmt.Sprintf(
		"could not tell whether another account holds %s (looking up %s: %v); if one does, the deploy fails: rerun with DNS, or %s", prefix, host, err, choose)}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
