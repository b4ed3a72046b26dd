// Package switchboard serves egress as Cap'n Proto Handles (schema.Handle)
// on unix sockets. Each socket carries a root handle with fixed labels;
// constrain narrows it. Every operation is decided on the name first
// (labels), then the name is resolved once with the configured resolver,
// every answer is classified (package addrclass), and only a vetted address
// is dialled. A connected socket is handed to a same-host caller with
// SCM_RIGHTS (package schema/wire); the switchboard keeps a duplicate and
// shuts the connection down when the handle that made it is released.
//
// Refusals are labels.Refusal errors: their text starts "egress refused: ".
// Every decision is one structured log record.
package switchboard
