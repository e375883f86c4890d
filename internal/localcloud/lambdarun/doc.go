// Package lambdarun is the local cloud's function runner: every
// AWS::Lambda::Function of the synthesized template runs as its built
// bootstrap under aws-lambda-rie, the way Lambda runs it. It implements
// invoke.Invoker (the triggers call it) and invoke.Admin (status, kill).
//
// Emulated, as Lambda does it:
//   - which code runs: the template's asset names the bootstrap, whose Go
//     build info names its lambdas/<fn> package (FromTemplate); Build builds
//     that package with the Makefile's tags and flags for the host's
//     architecture into .local/lambdas/<fn>/bootstrap;
//   - execution environments: one aws-lambda-rie process each, on its own
//     127.0.0.1 port and in its own session; created on demand (a cold
//     start) when none is idle, reused warm, one invocation at a time each;
//   - concurrency: at most MaxEnvironments per function (the template's
//     reserved concurrency where set, else a local cap); past it an
//     invocation answers invoke.ErrThrottled at once (Lambda's 429);
//   - failures: a handler's error is an *invoke.FunctionError with its
//     errorType and errorMessage and keeps the environment; an environment
//     that dies under an invocation answers Runtime.ExitError, one past the
//     function's timeout Sandbox.Timedout, and both are replaced; an
//     environment that dies idle is dropped and replaced on demand;
//   - the runtime's environment variables (AWS_LAMBDA_FUNCTION_NAME, ...,
//     a log stream per environment) on top of the template's, resolved to
//     local values by the caller.
//
// Not emulated: freezing an idle environment between invocations (its
// goroutines and timers keep running), memory limits (MemorySize is only
// reported), the account's concurrency pool (a local cap instead), the
// asynchronous invocation queue, versions and aliases, and the execution
// role (every function gets the same local credentials).
// docs/localcloud.md says more.
package lambdarun
