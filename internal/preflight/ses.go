package preflight

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	sestypes "github.com/aws/aws-sdk-go-v2/service/sesv2/types"
)

// checkEmailIdentity looks at the sender's identities in the Region. The
// stack creates the address's identity (AWS::SES::EmailIdentity), so:
//
//   - an address identity that exists already fails the deploy
//     (CloudFormation's AlreadyExists), verified or not;
//   - a verified domain lets the address send once the stack has made it;
//   - with neither, SES mails the address a link after the deploy and
//     refuses every send until it is clicked.
func checkEmailIdentity(ctx context.Context, api SESAPI, region, from string) Result {
	const check = "ses-identity"
	if a, err := mail.ParseAddress(from); err != nil || a.Address != from {
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"%s %q is not a bare email address (receipts@example.com): the synth refuses it", KeyEmailFrom, from)}
	}
	domain := from[strings.LastIndex(from, "@")+1:]
	addr, found, err := emailIdentity(ctx, api, from)
	if err != nil {
		return couldNot(region, check, "ses:GetEmailIdentity", err)
	}
	if found {
		state := "verified"
		if !addr.VerifiedForSendingStatus {
			state = fmt.Sprintf("not verified, %s", addr.VerificationStatus)
		}
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"SES already holds the identity %s in %s (%s): the stack creates it, and CloudFormation fails to create one that exists (AlreadyExists). "+
				"Delete it (aws sesv2 delete-email-identity --email-identity %s --region %s) and click the link SES mails after the deploy, or use another address. "+
				"If this stack is already deployed here, the identity is its own and this does not apply",
			from, region, state, from, region)}
	}
	dom, found, err := emailIdentity(ctx, api, domain)
	if err != nil {
		return couldNot(region, check, "ses:GetEmailIdentity", err)
	}
	verifyDomain := fmt.Sprintf("aws sesv2 create-email-identity --email-identity %s --region %s, then publish the three DKIM CNAMEs it returns", domain, region)
	switch {
	case found && dom.VerifiedForSendingStatus:
		return Result{Status: OK, Region: region, Check: check, Detail: fmt.Sprintf(
			"the domain %s is verified for sending; the stack creates %s's identity", domain, from)}
	case found:
		return Result{Status: Warn, Region: region, Check: check, Detail: fmt.Sprintf(
			"the domain %s has an identity that is not verified (%s): publish its DKIM records (aws sesv2 get-email-identity --email-identity %s --region %s lists them), "+
				"or click the link SES mails %s after the deploy; until then every send is refused and the emails wait PENDING", domain, dom.VerificationStatus, domain, region, from)}
	}
	return Result{Status: Warn, Region: region, Check: check, Detail: fmt.Sprintf(
		"neither %s nor %s is verified in %s: the stack creates %s's identity and SES mails it a link; every send is refused (the emails wait PENDING) until it is clicked. "+
			"Click it after the deploy, or verify the domain first: %s", from, domain, region, from, verifyDomain)}
}

// emailIdentity reads one identity; found is false when SES has none.
func emailIdentity(ctx context.Context, api SESAPI, identity string) (*sesv2.GetEmailIdentityOutput, bool, error) {
	out, err := api.GetEmailIdentity(ctx, &sesv2.GetEmailIdentityInput{EmailIdentity: &identity})
	var nf *sestypes.NotFoundException
	if errors.As(err, &nf) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// checkSESAccount warns while SES is in its sandbox (mail goes to verified
// addresses only; docs/deploy.md: with the worker's grant, to none) and
// fails when the account may not send at all.
func checkSESAccount(ctx context.Context, api SESAPI, region string) Result {
	const check = "ses-account"
	out, err := api.GetAccount(ctx, &sesv2.GetAccountInput{})
	if err != nil {
		return couldNot(region, check, "ses:GetAccount", err)
	}
	if !out.SendingEnabled {
		status := "unknown"
		if out.EnforcementStatus != nil {
			status = *out.EnforcementStatus
		}
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"SES sending is paused for the account in %s (enforcement status %s): see the SES console's account dashboard for why, and resolve it with AWS before relying on the email channel",
			region, status)}
	}
	if !out.ProductionAccessEnabled {
		return Result{Status: Warn, Region: region, Check: check, Detail: fmt.Sprintf(
			"SES is in the sandbox in %s: it mails verified addresses only, and with the worker's grant (the sender's identity alone) every send is refused (docs/deploy.md). "+
				"Request production access: aws sesv2 put-account-details --production-access-enabled --mail-type TRANSACTIONAL --website-url https://<your site> "+
				"--use-case-description '<what you send and to whom>' --region %s (or the SES console: Get set up > Request production access)", region, region)}
	}
	quota := ""
	if out.SendQuota != nil {
		quota = fmt.Sprintf(", %.0f messages a day", out.SendQuota.Max24HourSend)
	}
	return Result{Status: OK, Region: region, Check: check, Detail: "out of the SES sandbox" + quota}
}
