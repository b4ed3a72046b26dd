// Package reach says in plain words what a vat can reach.
//
// It says each grant as a person would say it ("HTTPS to api.example.com; the LAN
// host 10.0.0.5:5432"), and the whole answer to "what can this vat reach,
// and why", in English and Spanish. Pure functions of the status, no I/O.
package reach

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"toybox/labels"
	"toybox/vat/words"
)

type pair struct{ en, es string }

func (p pair) in(lang string) string {
	if lang == "es" {
		return p.es
	}
	return p.en
}

var (
	anyPort       = pair{"any port", "cualquier puerto"}
	anyHost       = pair{"any host", "cualquier equipo"}
	anyPublic     = pair{"any public address", "cualquier dirección pública"}
	anyLocal      = pair{"any address, the LAN and this computer included", "cualquier dirección, incluidas la red local y este ordenador"}
	lanHost       = pair{"the LAN host %s", "el equipo de la red local %s"}
	thisComputer  = pair{"this computer at %s", "este ordenador en %s"}
	publicHost    = pair{"the host %s", "el equipo %s"}
	localNet      = pair{" (the local network included)", " (incluida la red local)"}
	fromManifest  = pair{" (from its manifest)", " (de su manifiesto)"}
	schemeTo      = pair{"%s to %s", "%s a %s"}
	onPort        = pair{"port %d of %s", "el puerto %d de %s"}
	nameAnyPort   = pair{"%s, any port", "%s, cualquier puerto"}
	joinSeparator = "; "
)

// Grant says one grant in plain words.
func Grant(s labels.Set, lang string) string {
	port := s.Port
	if port == 0 {
		port = labels.DefaultPort(s.Scheme) // https with no port means 443
	}
	var where string
	switch {
	case s.Host == "":
		base := anyHost
		switch s.Network {
		case labels.NetworkPublic:
			base = anyPublic
		case labels.NetworkLocal:
			base = anyLocal
		}
		where = base.in(lang)
		if port != 0 {
			where = fmt.Sprintf(onPort.in(lang), port, where)
		}
	default:
		where = hostPhrase(s.Host, port, s.Scheme, lang)
		if s.Network == labels.NetworkLocal && !isIP(s.Host) {
			where += localNet.in(lang)
		}
	}
	if s.Scheme != "" {
		where = fmt.Sprintf(schemeTo.in(lang), strings.ToUpper(s.Scheme), where)
	}
	if s.Origin == labels.OriginManifest {
		where += fromManifest.in(lang)
	}
	return where
}

// Grants says a whole grant list, joined by "; ".
func Grants(sets []labels.Set, lang string) string {
	parts := make([]string, 0, len(sets))
	for _, s := range sets {
		parts = append(parts, Grant(s, lang))
	}
	return strings.Join(parts, joinSeparator)
}

func isIP(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

// hostPhrase is host and port as a person says them: an address by its
// kind (the LAN, this computer), a default port left out.
func hostPhrase(host string, port uint16, scheme, lang string) string {
	hp := host
	if strings.Contains(host, ":") {
		hp = "[" + host + "]"
	}
	if port != 0 && port != labels.DefaultPort(scheme) {
		hp += ":" + strconv.Itoa(int(port))
	} else if port == 0 && !isIP(host) {
		return fmt.Sprintf(nameAnyPort.in(lang), host)
	} else if port == 0 {
		hp += " (" + anyPort.in(lang) + ")"
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return hp
	}
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return fmt.Sprintf(thisComputer.in(lang), hp)
	case a.IsPrivate() || a.IsLinkLocalUnicast() || cgnat.Contains(a):
		return fmt.Sprintf(lanHost.in(lang), hp)
	}
	return fmt.Sprintf(publicHost.in(lang), hp)
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// Facts are what Explain needs to know of one vat.
type Facts struct {
	ID   string
	Word words.Word
	// Grant is the vat's grant: what its Handle admits.
	Grant []labels.Set
	// Dropped are the manifest's asks left out of the grant, each with
	// why ("<labels>: <why>").
	Dropped []string
	Doors   []string
	// Network is the network label of the supervisor's switchboard
	// handle ("public" or "local"); "" when the switchboard does not
	// answer (Down) or none is configured.
	Network string
	// Down is why the switchboard cannot be reached right now; "" when
	// it answers.
	Down string
	// NoSwitchboard: the supervisor holds no switchboard socket.
	NoSwitchboard bool
	// Unwalled: its app runs now without a wall (whatever its word:
	// starting, or not answering).
	Unwalled bool
	// Now is what the switchboard decides now for each grant it was asked
	// about, by the grant's index: the grants that name an address on
	// this computer or the LAN, whose reach depends on the switchboard's
	// handle and its listener-owner check, not on the grant alone.
	Now map[int]Verdict
}

// Verdict is the switchboard's answer for one grant's own address.
type Verdict struct {
	Allow  bool
	Reason string // why it was refused, or why there is no answer; empty when allowed
	// Unanswered: the switchboard did not answer (Reason says why).
	Unanswered bool
}

// AskSwitchboard reports whether Explain needs the switchboard's verdict
// on g (Facts.Now), and the target to ask: g's own host and port when the
// host is an address of this computer or the LAN (a loopback name
// included), which the switchboard's handle or its listener-owner check
// may refuse whatever the grant says. A grant without a host or port
// names no one target; a public address or a name is not asked (no DNS
// here, and no check the vat did not ask in the switchboard's log for
// every public grant).
func AskSwitchboard(g labels.Set) (labels.Request, bool) {
	port := g.Port
	if port == 0 {
		port = labels.DefaultPort(g.Scheme)
	}
	if g.Host == "" || port == 0 {
		return labels.Request{}, false
	}
	a, err := netip.ParseAddr(g.Host)
	nonPublic := err == nil && (a.Unmap().IsLoopback() || a.Unmap().IsPrivate() || a.Unmap().IsLinkLocalUnicast() || cgnat.Contains(a.Unmap()))
	if !nonPublic && !labels.LoopbackHost(g.Host) {
		return labels.Request{}, false
	}
	scheme := g.Scheme
	if scheme == "" {
		scheme = "tcp"
	}
	return labels.Request{Scheme: scheme, Host: g.Host, Port: port}, true
}

var (
	isWord             = pair{"%s is %s.", "%s está %s."}
	noGrant            = pair{"It can reach nothing outside its wall: it has no grant, so it holds no Handle.", "No puede alcanzar nada fuera de su muro: no tiene permiso, así que no tiene ningún Handle."}
	itCanReach         = pair{"Through its Handle it can reach:", "A través de su Handle puede alcanzar:"}
	nothingElse        = pair{"Nothing else: every other address is refused, with the reason.", "Nada más: cualquier otra dirección se rechaza, con el motivo."}
	viaPublic          = pair{"Its Handle is narrowed from the switchboard's public handle: every address must also be public. A name that resolves to a private, loopback or reserved address is refused, and so is every address on the operator's deny list.", "Su Handle sale del handle público de la centralita: cada dirección debe ser además pública. Un nombre que resuelve a una dirección privada, de loopback o reservada se rechaza, igual que cada dirección de la lista de bloqueo del operador."}
	viaLocal           = pair{"Its Handle is narrowed from the switchboard's local handle: it may reach the LAN and this computer where its grant names them and the switchboard admits it. A listener on this computer is judged by the switchboard's listener-owner check, unless the switchboard runs with --loopback unchecked (development only). The operator's deny list still applies.", "Su Handle sale del handle local de la centralita: puede alcanzar la red local y este ordenador donde su permiso los nombra y la centralita lo admite. Un servicio en este ordenador lo juzga la comprobación de dueño de la centralita, salvo si esta funciona con --loopback unchecked (solo para desarrollo). La lista de bloqueo del operador sigue aplicándose."}
	itsGrant           = pair{"Its grant names:", "Su permiso nombra:"}
	refusedNow         = pair{"%s: the switchboard refuses it now: %s", "%s: la centralita lo rechaza ahora: %s"}
	unansweredNow      = pair{"%s: the switchboard did not say whether it admits it (%s)", "%s: la centralita no dijo si lo admite (%s)"}
	sbDown             = pair{"Right now it can reach nothing: the switchboard is not answering (%s).", "Ahora mismo no puede alcanzar nada: la centralita no responde (%s)."}
	sbNone             = pair{"This supervisor holds no switchboard socket: no vat can reach anything outside its wall.", "Este supervisor no tiene socket de centralita: ningún vat puede alcanzar nada fuera de su muro."}
	droppedLine        = pair{"Its manifest asked for %s; it was not granted.", "Su manifiesto pidió %s; no se le concedió."}
	doorsLine          = pair{"Its doors: %s.", "Sus puertas: %s."}
	noDoors            = pair{"It has no doors.", "No tiene puertas."}
	sbDownHandle       = pair{"Right now its Handle reaches nothing: the switchboard is not answering (%s).", "Ahora mismo su Handle no alcanza nada: la centralita no responde (%s)."}
	sbNoneHandle       = pair{"This supervisor holds no switchboard socket: its Handle reaches nothing.", "Este supervisor no tiene socket de centralita: su Handle no alcanza nada."}
	noHandle           = pair{"It has no grant, so it holds no Handle.", "No tiene permiso, así que no tiene ningún Handle."}
	nothingElseThrough = pair{"Through its Handle nothing else: every other address asked through it is refused, with the reason.", "A través de su Handle nada más: cualquier otra dirección que pida por él se rechaza, con el motivo."}
	unwalled           = pair{"It runs without its wall: its Handle binds only what it asks through it. Nothing stops it from using the network this computer gives toybox itself.", "Funciona sin su muro: su Handle solo limita lo que pide a través de él. Nada le impide usar la red que este ordenador le da al propio toybox."}
	notRunning         = pair{"It is not running: it reaches nothing until it starts again.", "No está funcionando: no alcanza nada hasta que vuelva a arrancar."}
)

// Explain answers "what can this vat reach, and why", one sentence a line.
func Explain(f Facts, lang string) []string {
	out := []string{fmt.Sprintf(isWord.in(lang), f.ID, f.Word.In(lang))}
	if f.Word.Off() {
		out = append(out, notRunning.in(lang))
	}
	// Without its wall the Handle is not its only way out: nothing here
	// may say that it reaches nothing else.
	none, rest, down, noSB := noGrant, nothingElse, sbDown, sbNone
	if f.Unwalled || f.Word.Unwalled() {
		out = append(out, unwalled.in(lang))
		none, rest, down, noSB = noHandle, nothingElseThrough, sbDownHandle, sbNoneHandle
	}
	switch {
	case len(f.Grant) == 0:
		out = append(out, none.in(lang))
	default:
		head := itCanReach
		for _, v := range f.Now {
			if !v.Allow {
				head = itsGrant // not all of it reachable: no "it can reach" above a refusal
			}
		}
		out = append(out, head.in(lang))
		for i, g := range f.Grant {
			line := Grant(g, lang)
			switch v, ok := f.Now[i]; {
			case ok && v.Unanswered:
				line = fmt.Sprintf(unansweredNow.in(lang), line, v.Reason)
			case ok && !v.Allow:
				line = fmt.Sprintf(refusedNow.in(lang), line, v.Reason)
			}
			out = append(out, "  - "+line)
		}
		out = append(out, rest.in(lang))
		switch {
		case f.NoSwitchboard:
			out = append(out, noSB.in(lang))
		case f.Down != "":
			out = append(out, fmt.Sprintf(down.in(lang), f.Down))
		case f.Network == labels.NetworkLocal:
			out = append(out, viaLocal.in(lang))
		case f.Network == labels.NetworkPublic:
			out = append(out, viaPublic.in(lang))
		}
	}
	for _, d := range f.Dropped {
		out = append(out, fmt.Sprintf(droppedLine.in(lang), d))
	}
	if len(f.Doors) == 0 {
		out = append(out, noDoors.in(lang))
	} else {
		out = append(out, fmt.Sprintf(doorsLine.in(lang), strings.Join(f.Doors, ", ")))
	}
	return out
}
