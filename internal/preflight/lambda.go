package preflight

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/lambda"
)

// ConcurrencyQuotaCode is Lambda's "Concurrent executions" quota in
// Service Quotas.
const ConcurrencyQuotaCode = "L-B99A9384"

// unreservedFloor is what Lambda keeps unreserved: 100, or the whole quota
// when that is smaller (a reservation in an account whose quota is 10 is
// refused with "below its minimum value of [10]", at 50 with [50]).
func unreservedFloor(quota int32) int32 { return min(quota, 100) }

// smallQuota: new accounts start at 10 or 50 concurrent executions, which
// the stack's functions share.
const smallQuota = 100

// checkConcurrency refuses a reservation Lambda would refuse mid-deploy
// (the resolver's function fails and the stack rolls back) and warns of a
// quota small enough to throttle payments.
//
// On a redeploy the account's unreserved count already excludes the
// stack's own reservation, so this check may fail where the update would
// not: it is written for a first deploy.
func checkConcurrency(ctx context.Context, api LambdaAPI, region string, s Settings) Result {
	const check = "lambda-concurrency"
	out, err := api.GetAccountSettings(ctx, &lambda.GetAccountSettingsInput{})
	if err != nil {
		return couldNot(region, check, "lambda:GetAccountSettings", err)
	}
	if out.AccountLimit == nil {
		return Result{Status: Fail, Region: region, Check: check, Detail: "could not check: GetAccountSettings returned no AccountLimit"}
	}
	quota := out.AccountLimit.ConcurrentExecutions
	unreserved := quota
	if u := out.AccountLimit.UnreservedConcurrentExecutions; u != nil {
		unreserved = *u
	}
	reserve := int32(s.ResolverReservedConcurrency)
	increase := fmt.Sprintf("aws service-quotas request-service-quota-increase --service-code lambda --quota-code %s --desired-value 1000 --region %s",
		ConcurrencyQuotaCode, region)
	if floor := unreservedFloor(quota); reserve > 0 && unreserved-reserve < floor {
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"the stack reserves %d for the resolver, which would leave %d of the account's %d concurrent executions unreserved; Lambda keeps at least %d unreserved and refuses the function mid-deploy. "+
				"Raise the quota (Service Quotas, Lambda \"Concurrent executions\", code %s: %s), or deploy with -c %s=0",
			reserve, unreserved-reserve, quota, floor, ConcurrencyQuotaCode, increase, KeyResolverConcurrency)}
	}
	if quota < smallQuota {
		return Result{Status: Warn, Region: region, Check: check, Detail: fmt.Sprintf(
			"the account's Lambda concurrency quota is %d (a new account's): every function of the stack shares it, so a burst of payments is throttled. "+
				"Raise it (code %s): %s", quota, ConcurrencyQuotaCode, increase)}
	}
	return Result{Status: OK, Region: region, Check: check, Detail: fmt.Sprintf(
		"quota %d, %d unreserved; the stack reserves %d for the resolver", quota, unreserved, reserve)}
}
