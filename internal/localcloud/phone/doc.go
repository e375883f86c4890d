// Package phone is the local cloud's phone: what a buyer's device would show,
// recorded on disk so a user, `oncepay phone`, `make inspect` and the demo
// can look at it. It exists only in the local cloud; nothing that deploys
// imports it, and its resources and stack outputs are local-only.
//
// Two channels reach it, the two a deployed stack pushes through (package
// notify):
//   - the push topic: a standard SQS queue subscribed to the stack's push
//     topic with raw message delivery OFF, so each message is SNS's
//     notification envelope around the topic's "sqs" document (notify.Data),
//     as a subscribed channel sees it. A caller with no registered device is
//     pushed here (the sandbox's topic fallback).
//   - devices: SNS platform endpoints of the phone's own platform
//     application. A device registered for a caller (notify.DeviceStore,
//     with an endpoint made under that application) is pushed directly, and
//     moto records each publish on the endpoint (moto-only:
//     /moto-api/data.json), where the phone reads it.
//
// Provision creates the queue, its subscription and the platform application
// (`make up` calls it); Run is the long-running reader (the local cloud's
// service runs it); Read and Show are the view.
//
// Durability. Every push is appended to pushes.jsonl (one JSON object a
// line) and fsynced before its queue message is deleted, so a crash loses
// nothing and at worst appends a push twice (at-least-once, as every SQS
// consumer). A line carries SNS's message id, and Show counts alerts by
// distinct message id, so a copy the phone itself appended twice is never an
// extra alert. Endpoint messages are never deleted by moto: the ids already
// in the file are the reader's cursor.
package phone
