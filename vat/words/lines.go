package words

import "fmt"

// Line is one sentence of a vat's wall line: what its wall lets it read
// and change beyond its own folders, and what no wall covers. Like the
// words, each is here once, in English and Spanish; a line with a %s
// takes the names it says (In).
type Line int

// The lines.
const (
	// LineNotCovered is the fixed sentence that ends every walled vat's
	// wall line: what runs outside walls on a computer.
	LineNotCovered Line = iota + 1
	// LineUnwalled: a vat that runs without a wall.
	LineUnwalled
	// LineDocker: the Docker socket is reachable from an unwalled vat.
	LineDocker
	// LineUnwalledAsToybox: an unwalled vat runs as toybox's own user
	// (a supervisor that is not root gives vats no uid of their own).
	LineUnwalledAsToybox
	// LineSharesFolder: a shared host folder, all of it (its name, its
	// path).
	LineSharesFolder
	// LineSharesEntries: a shared host folder with only some of its
	// entries visible (its name, the entries, its path).
	LineSharesEntries
	// LineSharesCredentials: a shared credential set (its name, its
	// environment keys).
	LineSharesCredentials
	// LineStateFolder: a host folder the vat keeps state in.
	LineStateFolder
)

var lines = map[Line]pair{
	LineNotCovered: {
		"A wall covers its own vat only: vats that run without their wall, and approved commands, run outside walls on this computer.",
		"Un muro cubre solo a su propio vat: los vats que funcionan sin su muro, y las órdenes aprobadas, funcionan fuera de los muros en este ordenador.",
	},
	LineUnwalled: {
		"It runs without a wall: it can read and change whatever its user can on this computer, and reach the network toybox has, under no_new_privs only.",
		"Funciona sin muro: puede leer y cambiar todo lo que su usuario puede en este ordenador, y llegar a la red que tiene toybox, solo bajo no_new_privs.",
	},
	LineDocker: {
		"The Docker socket is reachable from it: whoever holds that socket is root on this computer.",
		"El socket de Docker está a su alcance: quien tiene ese socket es root en este ordenador.",
	},
	LineUnwalledAsToybox: {
		"It runs as toybox's own user: it can change toybox's state, every vat's code and data, and the owners' choices of which vats run walled.",
		"Funciona como el propio usuario de toybox: puede cambiar el estado de toybox, el código y los datos de cada vat, y las elecciones de los dueños sobre qué vats funcionan con muro.",
	},
	LineSharesFolder: {
		"It shares %s with the host: it can read and change everything in %s, as the host does.",
		"Comparte %s con el ordenador: puede leer y cambiar todo lo que hay en %s, igual que el ordenador.",
	},
	LineSharesEntries: {
		"It shares %s with the host: it can read and change %s in %s, as the host does; the folder's other entries are hidden from it, but one made there after it started shows until it starts again.",
		"Comparte %s con el ordenador: puede leer y cambiar %s en %s, igual que el ordenador; las demás entradas de la carpeta le quedan ocultas, pero una creada allí después de que arrancara se ve hasta que vuelva a arrancar.",
	},
	LineSharesCredentials: {
		"It shares %s with the host: it holds %s, and can read and change whatever they open.",
		"Comparte %s con el ordenador: tiene %s, y puede leer y cambiar todo lo que abren.",
	},
	LineStateFolder: {
		"It keeps state in %s, which it can read and change.",
		"Guarda su estado en %s, que puede leer y cambiar.",
	},
}

// In returns the line in lang ("en" or "es"; anything else is English),
// with args in place of its %s.
func (l Line) In(lang string, args ...any) string {
	p := lines[l]
	f := p.en
	if lang == "es" {
		f = p.es
	}
	if len(args) == 0 {
		return f
	}
	return fmt.Sprintf(f, args...)
}

// Lines lists every line, for tests and documentation.
func Lines() []Line {
	return []Line{LineNotCovered, LineUnwalled, LineDocker, LineUnwalledAsToybox, LineSharesFolder, LineSharesEntries, LineSharesCredentials, LineStateFolder}
}
