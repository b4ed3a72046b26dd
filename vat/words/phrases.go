package words

// Phrase is one fixed text of the operator's surfaces: a notice's title,
// a heading or a button of the status page. Like the status words, each
// is here once, in English and Spanish.
type Phrase int

// The phrases.
const (
	// Notices (the walls design's titles).
	NoticeSomeNotWalled Phrase = iota + 1
	NoticeNowWalled
	NoticeKillSwitch
	NoticeChangedOutside
	// The closing line of a notice sent while the kill switch is set.
	NoticeKillSwitchLine
	// The line of a notice whose settings file changed outside toybox.
	NoticeChangedOutsideLine
	// The one line of the kill switch's first notice.
	NoticeKillSwitchFirstLine

	// The status page.
	PageTitle
	PageNotices
	PageNoNotices
	PageVats
	PageNoVats
	PageHost
	PageWord
	PageTier
	PageCode
	PageGrant
	PageNoGrant
	PageLimits
	PageNoLimits
	PageDoors
	PageMCP
	PageRestarts
	PageLastExit
	PageLastError
	PageLastRefusal
	PageDecisions
	PageNoDecisions
	PageLogTail
	PageAllowed
	PageRefused
	PageFailed
	PageSwitchboard
	PageSwitchboardUp
	PageSwitchboardDown
	PageSwitchboardNone
	PageWalls
	PageFixItReason
	PageFixItRemedy
	PageRunUnwalled
	PageWallAgain
	PageFixItByAdmin
	PageLogin
	PageToken
	PageUpdated
	PageDropped
	PageFixItGeneric
	PageFixItStale
	PageBack
	PageWallsOn
	PageWallsKill
	PageWallsHostOff
	PageLanguage
	PageEgressDown
	PageEgressDownHandle
	PageTarget
	PageOutcome
	PageReason
	PageWhen
	PageNoLog
	PageDelivered
	PageNotDelivered
	PageCardNeedsAdmin
	// The heading of a vat's wall line (supervisor.Status.WallLine).
	PageDockerReachable
	PageWallLine
)

var phrases = map[Phrase]pair{
	NoticeSomeNotWalled:       {"Some vats are not walled", "Algunos vats no están amurallados"},
	NoticeNowWalled:           {"Vats now run inside walls on this computer", "Los vats ahora funcionan dentro de muros en este ordenador"},
	NoticeKillSwitch:          {"Walls are switched off on this computer by the kill switch", "Los muros están desactivados en este ordenador por el interruptor de emergencia"},
	NoticeChangedOutside:      {"Wall settings were changed outside toybox", "La configuración de los muros se cambió fuera de toybox"},
	NoticeKillSwitchLine:      {"The kill switch is set (TOYBOX_WALLS=off): no vat runs inside its wall.", "El interruptor de emergencia está puesto (TOYBOX_WALLS=off): ningún vat funciona dentro de su muro."},
	NoticeChangedOutsideLine:  {"walls.json was changed by something other than toybox. The new settings take effect the next time each vat starts.", "walls.json lo cambió algo que no es toybox. La nueva configuración se aplica la próxima vez que arranque cada vat."},
	NoticeKillSwitchFirstLine: {"This build of toybox runs vats inside walls, but the kill switch (TOYBOX_WALLS=off) keeps every wall off. Unset it and restart toybox to wall them.", "Esta versión de toybox ejecuta los vats dentro de muros, pero el interruptor de emergencia (TOYBOX_WALLS=off) mantiene todos los muros apagados. Quítalo y reinicia toybox para amurallarlos."},

	PageTitle:            {"toybox status", "estado de toybox"},
	PageNotices:          {"Notices", "Avisos"},
	PageNoNotices:        {"No notices since toybox started.", "Ningún aviso desde que arrancó toybox."},
	PageVats:             {"Vats", "Vats"},
	PageNoVats:           {"No vat is installed.", "No hay ningún vat instalado."},
	PageHost:             {"This computer", "Este ordenador"},
	PageWord:             {"status", "estado"},
	PageTier:             {"tier", "nivel"},
	PageCode:             {"code", "código"},
	PageGrant:            {"can reach", "puede alcanzar"},
	PageNoGrant:          {"nothing: it has no grant", "nada: no tiene permiso"},
	PageLimits:           {"limits", "límites"},
	PageNoLimits:         {"none: it does not run inside a wall", "ninguno: no funciona dentro de un muro"},
	PageDoors:            {"doors", "puertas"},
	PageMCP:              {"MCP", "MCP"},
	PageRestarts:         {"restarts", "reinicios"},
	PageLastExit:         {"last exit", "última salida"},
	PageLastError:        {"why", "por qué"},
	PageLastRefusal:      {"last refusal", "último rechazo"},
	PageDecisions:        {"Recent egress decisions", "Decisiones de salida recientes"},
	PageNoDecisions:      {"No egress asked for since it started.", "No pidió ninguna salida desde que arrancó."},
	PageLogTail:          {"Its output (tail)", "Su salida (final)"},
	PageAllowed:          {"allowed", "permitido"},
	PageRefused:          {"refused", "rechazado"},
	PageFailed:           {"failed", "falló"},
	PageSwitchboard:      {"switchboard", "centralita"},
	PageSwitchboardUp:    {"answering", "responde"},
	PageSwitchboardDown:  {"not answering: no vat can reach anything", "no responde: ningún vat puede alcanzar nada"},
	PageSwitchboardNone:  {"none: no vat can be granted egress", "ninguna: no se puede dar salida a ningún vat"},
	PageWalls:            {"walls", "muros"},
	PageFixItReason:      {"What went wrong", "Qué falló"},
	PageFixItRemedy:      {"What to do", "Qué hacer"},
	PageRunUnwalled:      {"Run without the wall", "Ejecutar sin el muro"},
	PageWallAgain:        {"Wall it again", "Amurallarlo de nuevo"},
	PageFixItByAdmin:     {"These buttons work on the admin socket only.", "Estos botones solo funcionan en el socket de administración."},
	PageLogin:            {"Sign in", "Entrar"},
	PageToken:            {"The token in the status.token file of toybox's state folder", "El token del archivo status.token de la carpeta de estado de toybox"},
	PageUpdated:          {"as of", "a las"},
	PageDropped:          {"asked for, not granted", "pedido, no concedido"},
	PageFixItGeneric:     {"Mend the cause, then restart it (POST /<vat>/restart). Or run it without its wall: it then reaches whatever this computer lets toybox itself reach.", "Arregla la causa y reinícialo (POST /<vat>/restart). O ejecútalo sin su muro: entonces alcanza todo lo que este ordenador le deja alcanzar al propio toybox."},
	PageFixItStale:       {"This card is out of date: nothing was changed. Reload the page for the current one.", "Esta tarjeta está desactualizada: no se cambió nada. Recarga la página para ver la actual."},
	PageBack:             {"Back to the status page", "Volver a la página de estado"},
	PageWallsOn:          {"on", "activados"},
	PageWallsKill:        {"off: the kill switch is set (TOYBOX_WALLS=off)", "desactivados: el interruptor de emergencia está puesto (TOYBOX_WALLS=off)"},
	PageWallsHostOff:     {"off for this computer (TOYBOX_WALLS_DEFAULT=off)", "desactivados en este ordenador (TOYBOX_WALLS_DEFAULT=off)"},
	PageLanguage:         {"Español", "English"},
	PageEgressDown:       {"it can reach nothing right now: the switchboard is not answering", "ahora mismo no puede alcanzar nada: la centralita no responde"},
	PageEgressDownHandle: {"its Handle reaches nothing right now: the switchboard is not answering", "ahora mismo su Handle no alcanza nada: la centralita no responde"},
	PageTarget:           {"target", "destino"},
	PageOutcome:          {"decision", "decisión"},
	PageReason:           {"reason", "motivo"},
	PageWhen:             {"when", "cuándo"},
	PageNoLog:            {"It has written nothing.", "No ha escrito nada."},
	PageDelivered:        {"delivered", "entregado"},
	PageNotDelivered:     {"not delivered", "no entregado"},
	PageCardNeedsAdmin:   {"Use the admin socket to act on this card:", "Usa el socket de administración para actuar sobre esta tarjeta:"},
	PageDockerReachable:  {"docker reachable", "docker al alcance"},
	PageWallLine:         {"its wall", "su muro"},
}

// In returns the phrase in lang ("en" or "es"; anything else is English).
func (p Phrase) In(lang string) string {
	t, ok := phrases[p]
	if !ok {
		return ""
	}
	if lang == "es" {
		return t.es
	}
	return t.en
}

// String returns the English phrase.
func (p Phrase) String() string { return p.In("en") }

// Phrases lists every phrase, for tests.
func Phrases() []Phrase {
	out := make([]Phrase, 0, len(phrases))
	for p := NoticeSomeNotWalled; p <= PageWallLine; p++ {
		out = append(out, p)
	}
	return out
}

// Langs are the languages every word and phrase is in.
var Langs = []string{"en", "es"}
