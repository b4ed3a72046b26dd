package packages_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toybox/vat/packages"
)

// tgzEntry is one entry of a test tarball: its header, and its body of
// Size bytes (zeros unless Body is set).
type tgzEntry struct {
	tar.Header
	Body string
}

// makeTgz writes a gzip'd tar of entries.
func makeTgz(t *testing.T, entries ...tgzEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := e.Header
		if e.Body != "" {
			h.Size = int64(len(e.Body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		body := bytes.NewReader([]byte(e.Body))
		if e.Body == "" {
			body = bytes.NewReader(make([]byte, h.Size))
		}
		if _, err := body.WriteTo(tw); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestUnpack(t *testing.T) {
	pj := tgzEntry{Header: tar.Header{Name: "package/package.json", Typeflag: tar.TypeReg}, Body: `{"name":"p"}`}
	lim := packages.Limits{Entries: 16, Bytes: 1 << 20}
	tests := []struct {
		name string
		tgz  []tgzEntry
		err  error
		says string // in the error
	}{
		{name: "a file", tgz: []tgzEntry{pj}},
		{
			name: "links and fifos left out",
			tgz: []tgzEntry{
				pj,
				{Header: tar.Header{Name: "package/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}},
				{Header: tar.Header{Name: "package/h", Typeflag: tar.TypeLink, Linkname: "package/package.json"}},
				{Header: tar.Header{Name: "package/f", Typeflag: tar.TypeFifo}},
			},
		},
		{
			name: "a name that climbs out",
			tgz:  []tgzEntry{{Header: tar.Header{Name: "package/../../x", Typeflag: tar.TypeReg}, Body: "x"}},
			err:  packages.ErrBadTarball,
		},
		{
			name: "files past the size limit",
			tgz:  []tgzEntry{pj, {Header: tar.Header{Name: "package/big", Typeflag: tar.TypeReg, Size: 2 << 20}}},
			err:  packages.ErrBadTarball,
		},
		{
			// An entry of a kind that is left out is still read through:
			// gzip'd zeros make a small tarball that takes the supervisor
			// minutes to read.
			name: "a left-out entry past the size limit",
			tgz:  []tgzEntry{pj, {Header: tar.Header{Name: "package/c", Typeflag: tar.TypeCont, Size: 8 << 20}}},
			err:  packages.ErrBadTarball,
			says: "tarballs unpack to more than",
		},
		{
			name: "left-out entries past the size limit",
			tgz: []tgzEntry{
				pj,
				{Header: tar.Header{Name: "package/c1", Typeflag: 'Z', Size: 600 << 10}},
				{Header: tar.Header{Name: "package/c2", Typeflag: 'Z', Size: 600 << 10}},
			},
			err:  packages.ErrBadTarball,
			says: "tarballs unpack to more than",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tree, err := packages.NewTree(dir, lim)
			if err != nil {
				t.Fatal(err)
			}
			defer tree.Close()
			err = tree.Unpack(bytes.NewReader(makeTgz(t, tt.tgz...)), "node_modules/p")
			if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) || err != nil && !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Unpack = %v; want %v saying %q", err, tt.err, tt.says)
			}
			if tt.err != nil {
				return
			}
			if _, err := os.Stat(filepath.Join(dir, "node_modules/p/package.json")); err != nil {
				t.Errorf("package.json was not unpacked: %v", err)
			}
			for _, p := range []string{"l", "h", "f"} {
				if _, err := os.Lstat(filepath.Join(dir, "node_modules/p", p)); err == nil {
					t.Errorf("%s was unpacked; want it left out", p)
				}
			}
		})
	}
}
