package owner

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestNewRefuses(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := New(Config{}); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("New off Linux = %v; want ErrUnsupported", err)
		}
		return
	}
	roots := []string{"/var/lib/toybox"}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"negative uid", Config{ToyboxUID: -1, OwnRoots: roots}},
		{"ttl above 2s", Config{ToyboxUID: 64000, OwnRoots: roots, CacheTTL: 3 * time.Second}},
		{"relative root", Config{ToyboxUID: 64000, OwnRoots: []string{"var/lib/toybox"}}},
		{"no roots", Config{ToyboxUID: 64000}},
		{"bad docker host", Config{ToyboxUID: 64000, OwnRoots: roots, DockerHost: "::nonsense"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if !errors.Is(err, ErrConfig) {
				if c != nil {
					c.Close()
				}
				t.Errorf("New(%+v) = %v; want an error wrapping ErrConfig", tt.cfg, err)
			}
		})
	}
	for _, cfg := range []Config{
		{ToyboxUID: 0},
		{ToyboxUID: 64000, OwnRoots: roots, CacheTTL: 2 * time.Second},
		{ToyboxUID: 64000, OwnRoots: roots, CacheTTL: -1, DockerHost: "unix:///run/docker.sock"},
	} {
		c, err := New(cfg)
		if err != nil {
			t.Errorf("New(%+v) = %v; want a checker", cfg, err)
			continue
		}
		c.Close()
	}
}
