//go:build !linux

package bench

import "context"

func (r *run) spawnSection(context.Context) {
	r.row(RowSpawn).NotMeasured(ErrUnsupported.Error())
	r.row(RowSpawnNone).NotMeasured(ErrUnsupported.Error())
}
