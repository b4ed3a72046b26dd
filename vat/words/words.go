// Package words holds every status word a vat can have, in English and
// Spanish. The status API, the CLI and the logs all take their words from
// here, so they never disagree.
package words

import "toybox/vat/wall"

// Word is one status of a vat. The zero Word is Unknown.
type Word int

// The status words.
const (
	Unknown Word = iota
	// Starting: the app was launched and is not yet listening.
	Starting
	// Restarting: the app went away and waits out its backoff.
	Restarting
	// Walled: the app runs inside its wall, seccomp included.
	Walled
	// WalledNoSeccomp: inside its wall, without a seccomp filter (an
	// architecture without a syscall table).
	WalledNoSeccomp
	// NotWalledChoice: the owner chose to run this vat without its wall.
	NotWalledChoice
	// NotWalledHost: the per-host default is not walled.
	NotWalledHost
	// NotWalledOperator: the kill switch is set.
	NotWalledOperator
	// OffWall: the wall could not be built, or the app failed inside it
	// before it ever listened.
	OffWall
	// OffStopped: the app went away and will not be restarted.
	OffStopped
	// OffRemoved: stopped by its owner (DELETE).
	OffRemoved
	// OffShutdown: the supervisor is shutting down.
	OffShutdown
	// Stopping: the app is being stopped to start again (a restart, an
	// upgrade); it answers no new requests meanwhile.
	Stopping
	// NotAnswering: the app runs (its tier says how) but the last request
	// found nothing accepting on its socket (removed, or no longer
	// listened on). Requests still go to it; the first one it accepts
	// brings back the word it had.
	NotAnswering
	// OffMemory: the kernel killed it for going past its memory limit;
	// it starts again after its backoff. Its words name the limit (With).
	OffMemory
	// OffDamaged: the vat's record cannot be read and has no good copy.
	// Its id and uid stay reserved until the record is repaired, written
	// again (an install) or removed.
	OffDamaged
	// OffChanged: a package vat's installed files differ from what was
	// installed (checked before every start); it is not started.
	OffChanged
	// OffPackages: a package could not be prepared inside its prepare
	// wall (resolved, fetched, checked or unpacked). The reason an
	// install answers; npm's own output goes to the supervisor's log.
	OffPackages
	// OffNoBwrap: walls are on and this computer has no bubblewrap, so
	// nothing can run walled here.
	OffNoBwrap
	// NotWalledNoBwrap: the per-host default is off on a computer with no
	// bubblewrap; the app runs under no_new_privs only.
	NotWalledNoBwrap
	// NotWalledNoBwrapDocker: as NotWalledNoBwrap, and the Docker socket
	// is reachable from the app.
	NotWalledNoBwrapDocker
	// NotWalledApproved: the operator approved its code (by hash) to run
	// without a wall.
	NotWalledApproved
	// NotWalledShares: inside its wall, sharing a host folder or
	// credential set with the host; its words name the share (With).
	NotWalledShares
)

type pair struct{ en, es string }

var table = map[Word]pair{
	Unknown:                {"unknown", "desconocido"},
	Starting:               {"starting", "arrancando"},
	Restarting:             {"restarting", "reiniciando"},
	Walled:                 {"walled", "amurallado"},
	WalledNoSeccomp:        {"walled-noseccomp", "amurallado-sin-seccomp"},
	NotWalledChoice:        {"not walled (your choice)", "sin muro (por tu elección)"},
	NotWalledHost:          {"not walled (switched off for this computer)", "sin muro (desactivado en este ordenador)"},
	NotWalledOperator:      {"not walled (switched off by the operator)", "sin muro (desactivado por el operador)"},
	OffWall:                {"off: it could not run inside its wall", "apagado: no pudo funcionar dentro de su muro"},
	OffStopped:             {"off: it stopped", "apagado: se detuvo"},
	OffRemoved:             {"off: removed by its owner", "apagado: retirado por su dueño"},
	OffShutdown:            {"off: the supervisor is stopping", "apagado: el supervisor se está deteniendo"},
	Stopping:               {"stopping to start again", "deteniéndose para volver a arrancar"},
	NotAnswering:           {"not answering: nothing accepts on its socket", "no responde: nada acepta en su socket"},
	OffMemory:              {"off: it ran out of memory", "apagado: se quedó sin memoria"},
	OffDamaged:             {"off: its record is damaged", "apagado: su registro está dañado"},
	OffChanged:             {"off: its installed files changed", "apagado: sus archivos instalados cambiaron"},
	OffPackages:            {"off: it could not get its packages ready inside its wall", "apagado: no pudo preparar sus paquetes dentro de su muro"},
	OffNoBwrap:             {"off: bubblewrap is not installed on this computer", "apagado: bubblewrap no está instalado en este ordenador"},
	NotWalledNoBwrap:       {"not walled on this computer", "sin muro en este ordenador"},
	NotWalledNoBwrapDocker: {"not walled on this computer; docker reachable", "sin muro en este ordenador; docker al alcance"},
	NotWalledApproved:      {"not walled (approved commands)", "sin muro (órdenes aprobadas)"},
	NotWalledShares:        {"not walled: shares", "sin muro: comparte"},
}

// named are the words whose detail is part of the word itself ("not
// walled: shares Crow's database"), not a parenthesis after it.
var named = map[Word]bool{NotWalledShares: true}

// String returns the English word.
func (w Word) String() string { return w.In("en") }

// In returns the word in lang ("en" or "es"; anything else is English).
func (w Word) In(lang string) string {
	p, ok := table[w]
	if !ok {
		p = table[Unknown]
	}
	if lang == "es" {
		return p.es
	}
	return p.en
}

// With returns the word in lang followed by detail in parentheses ("off:
// it ran out of memory (512 MiB)"), or by detail itself for a word that
// names it ("not walled: shares Crow's database"); just the word when
// detail is empty.
func (w Word) With(lang, detail string) string {
	switch {
	case detail == "":
		return w.In(lang)
	case named[w]:
		return w.In(lang) + " " + detail
	}
	return w.In(lang) + " (" + detail + ")"
}

// Off reports whether w means the app is not running and not about to.
func (w Word) Off() bool {
	switch w {
	case OffWall, OffStopped, OffRemoved, OffShutdown, OffChanged, OffPackages, OffDamaged, OffNoBwrap, Unknown:
		return true
	}
	return false
}

// Serving reports whether w means the app is up and answering.
// NotAnswering is not serving, though requests still go to its app
// (Routed).
func (w Word) Serving() bool {
	switch w {
	case Walled, WalledNoSeccomp, NotWalledChoice, NotWalledHost, NotWalledOperator,
		NotWalledNoBwrap, NotWalledNoBwrapDocker, NotWalledApproved, NotWalledShares:
		return true
	}
	return false
}

// Unwalled reports whether w means the app runs without a wall (a
// switch, an approved command, no bubblewrap).
func (w Word) Unwalled() bool {
	switch w {
	case NotWalledChoice, NotWalledHost, NotWalledOperator, NotWalledNoBwrap, NotWalledNoBwrapDocker, NotWalledApproved:
		return true
	}
	return false
}

// NotWalled reports whether w reads "not walled": the app runs without a
// wall, or inside one that shares a host resource with the host.
func (w Word) NotWalled() bool { return w.Unwalled() || w == NotWalledShares }

// Routed reports whether public requests go to the app under w: when it
// serves, and when it last did not answer (a request is how it is seen to
// answer again).
func (w Word) Routed() bool { return w.Serving() || w == NotAnswering }

// FromTier maps a wall tier (wall.Tier*) to its word. An unknown tier is
// Unknown: it is never read as walled.
func FromTier(tier string) Word {
	switch tier {
	case wall.TierWalled:
		return Walled
	case wall.TierWalledNoSeccomp:
		return WalledNoSeccomp
	}
	return Unknown
}

// All lists every word, for tests and documentation.
func All() []Word {
	return []Word{
		Unknown, Starting, Restarting, Walled, WalledNoSeccomp, NotWalledChoice, NotWalledHost, NotWalledOperator, OffWall, OffStopped, OffRemoved, OffShutdown, Stopping, NotAnswering, OffMemory, OffChanged, OffPackages, OffDamaged,
		OffNoBwrap, NotWalledNoBwrap, NotWalledNoBwrapDocker, NotWalledApproved, NotWalledShares,
	}
}
