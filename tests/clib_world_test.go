package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The software people run on RDMA (UCX, libfabric, Open MPI) links
// rdma-core's provider libraries libmlx5 and libefa directly: the C
// library's stand-ins must carry every symbol and version those import,
// or the program (or the plugin holding its verbs transports) does not
// load at all, and must answer "not this device" so the program falls
// back to plain verbs.

// TestCLibProviderStubs runs clib/test/dvstubs: the mlx5dv_* and efadv_*
// calls a program makes on an rnicd device answer as rdma-core's
// providers do for a foreign device, and ibv_get_sysfs_path has
// rdma-core's prototype and answer (Open MPI's openib read a garbage
// pointer from the old one and faulted).
func TestCLibProviderStubs(t *testing.T) {
	newToolBench(t)
	lib := clibDir(t)
	want := strings.Join([]string{
		"mlx5dv_is_supported is false: ok",
		"mlx5dv_open_device: NULL, EOPNOTSUPP: ok",
		"mlx5dv_query_device: EOPNOTSUPP: ok",
		"mlx5dv_create_cq: NULL, EOPNOTSUPP: ok",
		"mlx5dv_devx_alloc_uar: NULL, EOPNOTSUPP: ok",
		"mlx5dv_devx_general_cmd: EOPNOTSUPP: ok",
		"mlx5dv_devx_create_event_channel: NULL, EOPNOTSUPP: ok",
		"mlx5dv_init_obj: EOPNOTSUPP: ok",
		"efadv_query_device: EOPNOTSUPP: ok",
		"efadv_create_cq: NULL, EOPNOTSUPP: ok",
		"ibv_get_sysfs_path: ok",
		"PASS", "",
	}, "\n")
	for _, env := range [][]string{
		nil,
		// rdma-core's honours SYSFS_PATH, trailing slashes dropped.
		{"SYSFS_PATH=/tmp/sysfs//", "DVSTUBS_SYSFS=/tmp/sysfs"},
	} {
		cmd := exec.Command(filepath.Join(lib, "dvstubs"), "rnicB")
		cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+lib), env...)
		if out := runOut(t, cmd); out != want {
			t.Errorf("dvstubs with %v printed\n%s\nwant\n%s", env, out, want)
		}
	}
}

// TestCLibWorldLoads runs Debian's ucx_info and fi_info on the C
// library: UCX's verbs plugin (libuct_ib, which needs 22 mlx5dv symbols
// of versions MLX5_1.1 to MLX5_1.11) loads, which ucx_info shows by
// listing rdmacm, the connection manager that plugin carries; libfabric
// (which needs EFA_1.2) loads and its verbs provider lists both devices.
func TestCLibWorldLoads(t *testing.T) {
	newToolBench(t)
	ucxInfo := debianTool(t, "ucx_info", "ucx-utils")
	fiInfo := debianTool(t, "fi_info", "libfabric-bin")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out := runOut(t, ucxInfo(ctx, "", "-d")); !strings.Contains(out, "# Connection manager: rdmacm\n") {
		t.Errorf("ucx_info -d lists no rdmacm connection manager: libuct_ib did not load\n%s", out)
	}
	out := runOut(t, fiInfo(ctx, "", "-p", "verbs"))
	for _, dev := range []string{"rnicA", "rnicB"} {
		if !strings.Contains(out, "provider: verbs\n") || !strings.Contains(out, "    domain: "+dev+"-dgram\n") {
			t.Errorf("fi_info -p verbs lists no datagram domain of %s:\n%s", dev, out)
		}
	}
}
