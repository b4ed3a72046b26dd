//go:build !linux

package dockertest

import (
	"errors"
	"syscall"
)

func lock() (func(), error) { return nil, errors.New("the docker test daemon runs on Linux only") }

func detached() *syscall.SysProcAttr { return nil }
