package owner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// dockerTimeout bounds one question to the Docker Engine.
const dockerTimeout = 5 * time.Second

// newDockerClient connects lazily to host ("" = the client's default,
// unix:///var/run/docker.sock), negotiating the API version with the daemon.
// The caller must Close it.
func newDockerClient(host string) (*client.Client, error) {
	opts := []client.Opt{client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	c, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating docker client for %q: %w", host, err)
	}
	return c, nil
}

// runningContainers asks the Docker Engine for every running container and
// the ports it publishes.
func runningContainers(ctx context.Context, c *client.Client) ([]Container, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	list, err := c.ContainerList(ctx, container.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	out := make([]Container, 0, len(list))
	for _, s := range list {
		if s.State != "" && s.State != "running" {
			continue
		}
		ct := Container{ID: s.ID, Labels: s.Labels}
		if len(s.Names) > 0 {
			ct.Name = strings.TrimPrefix(s.Names[0], "/")
		} else {
			ct.Name = s.ID
		}
		for _, p := range s.Ports {
			if p.PublicPort == 0 {
				continue // exposed, not published
			}
			ct.Publish = append(ct.Publish, Published{IP: p.IP, Port: p.PublicPort, Proto: p.Type})
		}
		out = append(out, ct)
	}
	return out, nil
}
