package main

import (
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"toybox/vat/packages"
	"toybox/vat/supervisor"
)

// packageFlags registers serve's package flags; the function it returns
// reads them after parsing. A host without node or npm gets an empty
// config: package installs are then refused, saying why (and PyPI
// installs on a host without uv or python).
func packageFlags(fs *flag.FlagSet) func() (supervisor.PackagesConfig, error) {
	registry := fs.String("npm-registry", packages.DefaultRegistry, "the npm registry packages are installed from: the prepare wall's only egress")
	node := fs.String("node", "node", "the node program package vats run on (bound read-only in their walls)")
	npm := fs.String("npm", "npm", "the npm program that resolves packages inside the prepare wall")
	index := fs.String("pypi-index", packages.DefaultPyPIIndex, "the Python package index PyPI packages are installed from: the prepare wall's only egress for them")
	uv := fs.String("uv", "uv", "the uv program that resolves and installs PyPI packages inside the prepare wall")
	python := fs.String("python", "python3", "the python program PyPI package vats run on (bound read-only in their walls)")
	installs := fs.Int("installs", supervisor.DefaultInstalls, "how many package installs prepare at once (each a prepare folder of up to "+fmt.Sprint(supervisor.DefaultPrepareBytes>>20)+" MiB and a wall)")
	queue := fs.Int("install-queue", supervisor.DefaultInstallQueue, "how many more package installs wait their turn; past it one is refused with 429 (0: none waits)")
	return func() (supervisor.PackagesConfig, error) {
		if *installs < 1 || *installs > maxInstalls {
			return supervisor.PackagesConfig{}, fmt.Errorf("--installs %d: want 1 to %d", *installs, maxInstalls)
		}
		if *queue < 0 || *queue > maxInstallQueue {
			return supervisor.PackagesConfig{}, fmt.Errorf("--install-queue %d: want 0 to %d", *queue, maxInstallQueue)
		}
		if _, _, _, err := packages.RegistryHost(*registry); err != nil {
			return supervisor.PackagesConfig{}, fmt.Errorf("--npm-registry: %w", err)
		}
		if _, _, _, err := packages.RegistryHost(*index); err != nil {
			return supervisor.PackagesConfig{}, fmt.Errorf("--pypi-index: %w", err)
		}
		pc := supervisor.PackagesConfig{Registry: *registry, PyPIIndex: *index, Installs: *installs, InstallQueue: *queue}
		if *queue == 0 {
			pc.InstallQueue = -1 // none waits
		}
		if uvPath, err := realProgram(*uv); err == nil {
			if pyPath, err := realProgram(*python); err == nil {
				if out, err := exec.Command(pyPath, "--version").Output(); err == nil {
					pc.UV, pc.Python, pc.PythonVersion = uvPath, pyPath, strings.TrimPrefix(strings.TrimSpace(string(out)), "Python ")
				}
			}
		}
		nodePath, err := realProgram(*node)
		if err != nil {
			return pc, nil
		}
		out, err := exec.Command(nodePath, "--version").Output()
		if err != nil {
			return pc, nil
		}
		npmPath, err := realProgram(*npm)
		if err != nil {
			return pc, nil
		}
		pc.Node, pc.NodeVersion, pc.NPM = nodePath, strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), npmPath
		return pc, nil
	}
}

// The most --installs and --install-queue take.
const (
	maxInstalls     = 64   // each a prepare folder and a wall: more is a typo
	maxInstallQueue = 1024 // each a request held open
)

// realProgram finds name on PATH and resolves its links: npm is a link to
// its npm-cli.js, which the prepare wall runs with node directly.
func realProgram(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	if p, err = filepath.Abs(p); err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(p)
}
