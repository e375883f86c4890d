package oncepay

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// AlarmProps are a construct's own alarms: on by default, so a construct
// used alone is watched (its DLQs and failure queues are where nothing is
// lost only if someone looks). The oncepay stack turns them off and watches
// the same things from its Monitoring, with one topic and a dashboard.
type AlarmProps struct {
	// Disabled: the construct makes no alarms.
	Disabled bool
	// Topic receives each alarm's ALARM and OK; nil makes alarms without
	// actions (wire them yourself from the construct's Alarms).
	Topic awssns.ITopic
}

// constructAlarms makes the alarms of one construct under scope/Alarms.
type constructAlarms struct {
	scope  constructs.Construct
	topic  awssns.ITopic
	alarms map[string]awscloudwatch.Alarm
}

func newConstructAlarms(parent constructs.Construct, p AlarmProps) *constructAlarms {
	if p.Disabled {
		return nil
	}
	return &constructAlarms{
		scope:  constructs.NewConstruct(parent, jsii.String("Alarms")),
		topic:  p.Topic,
		alarms: map[string]awscloudwatch.Alarm{},
	}
}

func (c *constructAlarms) add(id, desc string, m awscloudwatch.IMetric, threshold float64) {
	c.alarms[id] = newAlarm(c.scope, id, desc, m, threshold, c.topic)
}

// newAlarm fires when m reaches threshold in one AlarmPeriod; no data is
// good news (no errors, no messages, nothing UNKNOWN reported). A topic,
// if any, gets its ALARM and its OK.
func newAlarm(scope constructs.Construct, id, desc string, m awscloudwatch.IMetric, threshold float64, topic awssns.ITopic) awscloudwatch.Alarm {
	a := awscloudwatch.NewAlarm(scope, jsii.String(id), &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String(desc),
		Metric:             m,
		Threshold:          jsii.Number(threshold),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	if topic != nil {
		action := awscloudwatchactions.NewSnsAction(topic)
		a.AddAlarmAction(action)
		a.AddOkAction(action)
	}
	return a
}

func (c *constructAlarms) all() map[string]awscloudwatch.Alarm {
	if c == nil {
		return nil
	}
	return c.alarms
}

func periodOpts(stat string) *awscloudwatch.MetricOptions {
	return &awscloudwatch.MetricOptions{Period: seconds(AlarmPeriod), Statistic: jsii.String(stat)}
}

func queueDepth(q awssqs.IQueue) awscloudwatch.IMetric {
	return q.MetricApproximateNumberOfMessagesVisible(periodOpts("Maximum"))
}

// handlerMetric is a metric a handler emits (EMF, dimension Function = the
// lambdas/<fn> name: two deployments in one account and Region share it).
func handlerMetric(name, function, stat string) awscloudwatch.IMetric {
	return handlerMetricOver(name, function, stat, AlarmPeriod)
}

// handlerMetricOver is handlerMetric over another period (a daily job's).
func handlerMetricOver(name, function, stat string, period time.Duration) awscloudwatch.IMetric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(stackenv.MetricsNamespace),
		MetricName:    jsii.String(name),
		DimensionsMap: &map[string]*string{"Function": jsii.String(function)},
		Statistic:     jsii.String(stat),
		Period:        seconds(period),
	})
}
