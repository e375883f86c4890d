package oncepay

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// RouteDevice is a caller's device: PUT registers or updates it, DELETE
// removes it (package devices).
const RouteDevice = "/devices/{device_id}"

// DeviceRegistryProps configures the devices function.
type DeviceRegistryProps struct {
	Protection
	// Api is the HTTP API (and its JWT authorizer) the routes go on
	// (required).
	Api *IdempotentApi
	// Ledger holds the devices table (required): the function runs in its
	// VPC and logs in as LedgerUser ("" means LedgerAppUser).
	Ledger     *Ledger
	LedgerUser string
	// PlatformApplicationArns (SNS mobile push, literal ARNs, one per
	// platform): devices are registered as endpoints under them. None
	// means a registration answers 422 platform-not-configured.
	PlatformApplicationArns []string
	LogRetention            awslogs.RetentionDays
	// Code of the function (required): the bootstrap of lambdas/devices.
	Code awslambda.Code
}

// DeviceRegistry is the devices function and its two routes.
type DeviceRegistry struct {
	constructs.Construct
	Function *GoFunction
	Routes   []awsapigatewayv2.HttpRoute
}

// NewDeviceRegistry creates the devices function behind the API's JWT
// authorizer, with the ledger login and the SNS endpoint rights of the
// configured platform applications only.
func NewDeviceRegistry(scope constructs.Construct, id string, props *DeviceRegistryProps) *DeviceRegistry {
	if props == nil || props.Api == nil || props.Ledger == nil {
		panic("oncepay: NewDeviceRegistry needs DeviceRegistryProps.Api and .Ledger")
	}
	if _, err := stackenv.PlatformApps(strings.Join(props.PlatformApplicationArns, ",")); err != nil {
		panic(err)
	}
	c := &DeviceRegistry{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Function = NewGoFunction(c.Construct, "Function", &GoFunctionProps{
		Name:          FnDevices,
		Code:          props.Code,
		Sizing:        SizingsFor(timingOrDefault(nil)).Devices,
		Vpc:           props.Ledger.Cluster.Vpc(),
		LogRetention:  props.LogRetention,
		RemovalPolicy: props.removalPolicy(),
		Description:   "oncepay devices: a caller's push devices, ordered by the device's own counter",
	})
	fn := c.Function
	props.Ledger.Connect(fn, props.LedgerUser)
	if apps := props.PlatformApplicationArns; len(apps) > 0 {
		var appArns, endpoints []*string
		for _, app := range apps {
			appArns = append(appArns, jsii.String(app))
			endpoints = append(endpoints, jsii.String(PlatformEndpointsArn(app)))
		}
		fn.Grant([]string{"sns:CreatePlatformEndpoint"}, appArns...)
		fn.Grant([]string{"sns:SetEndpointAttributes", "sns:DeleteEndpoint"}, endpoints...)
		fn.SetEnv(map[string]*string{EnvPushPlatformApps: jsii.String(strings.Join(apps, ","))})
		suppressApplies(fn.policy().Node().DefaultChild(), "AwsSolutions-IAM5",
			"sns:SetEndpointAttributes and sns:DeleteEndpoint on the endpoints of the configured platform applications only: SNS names an endpoint per device at registration, so the application's endpoint prefix is the narrowest name known at deploy time.",
			endpointFindings(apps)...)
	}
	suppress(cfn(fn.Function), "Serverless-LambdaDLQ",
		"Invoked synchronously by API Gateway: a failure is the caller's 503, and the app sends the same counter again; Lambda never queues these events.")
	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("DevicesIntegration"), fn.Function,
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0()})
	routes := props.Api.HttpApi.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
		Path:        jsii.String(RouteDevice),
		Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod_PUT, awsapigatewayv2.HttpMethod_DELETE},
		Integration: integration,
		Authorizer:  props.Api.Authorizer,
	})
	c.Routes = *routes
	return c
}
