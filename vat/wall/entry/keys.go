package entry

// Log attribute keys.
const (
	keyVat    = "vat"
	keyTarget = "target"
	keyScheme = "scheme"
	keyAllow  = "allow"
	keyReason = "reason"
	keyPath   = "path" // "fd", "stream", "request" or "transparent"
	keyOp     = "op"
	keyPort   = "port" // the app's port, in the relay's records
)

// DecisionMsg is the message of every egress decision's record (the
// switchboard's and the supervisor's too).
const DecisionMsg = "egress decision"
