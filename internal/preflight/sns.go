package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
)

// checkPlatformApp checks that the application is in the Region the worker
// publishes from, exists, and is enabled: SNS disables an application
// whose credentials the platform (APNs, FCM) refuses, and every push to
// its endpoints then fails.
func checkPlatformApp(ctx context.Context, api SNSAPI, region, arn string) Result {
	const check = "sns-platform-app"
	// arn:<partition>:sns:<region>:<account>:app/<platform>/<name>
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sns" || !strings.HasPrefix(parts[5], "app/") {
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"%q in %s is not a platform application ARN (arn:aws:sns:<region>:<account>:app/<platform>/<name>)", arn, KeyPlatformApps)}
	}
	if parts[3] != region {
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"%s is in %s, but the worker publishes in %s: create the application in %s (aws sns create-platform-application --region %s …) and name that ARN in %s",
			arn, parts[3], region, region, region, KeyPlatformApps)}
	}
	out, err := api.GetPlatformApplicationAttributes(ctx, &sns.GetPlatformApplicationAttributesInput{PlatformApplicationArn: &arn})
	var nf *snstypes.NotFoundException
	if errors.As(err, &nf) {
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"%s does not exist: create it (aws sns create-platform-application --region %s …) or correct %s", arn, region, KeyPlatformApps)}
	}
	if err != nil {
		return couldNot(region, check, "sns:GetPlatformApplicationAttributes", err)
	}
	if out.Attributes["Enabled"] != "true" {
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"%s is disabled (Enabled=%q): SNS turns an application off when the platform refuses its credentials, and every push to its endpoints fails. "+
				"Give it valid ones (aws sns set-platform-application-attributes --platform-application-arn %s --attributes PlatformCredential=…,PlatformPrincipal=… --region %s) and run preflight again, "+
				"or create a new application and name it in %s", arn, out.Attributes["Enabled"], arn, region, KeyPlatformApps)}
	}
	return Result{Status: OK, Region: region, Check: check, Detail: arn + " exists and is enabled"}
}
