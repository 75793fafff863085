package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/train"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestEnvFrom reads torchrun's and srun's variables, and names a bad one.
func TestEnvFrom(t *testing.T) {
	if _, ok, err := EnvFrom(envOf()); ok || err != nil {
		t.Errorf("no launcher: ok %v, err %v", ok, err)
	}
	e, ok, err := EnvFrom(envOf("RANK", "3", "WORLD_SIZE", "8", "LOCAL_RANK", "1",
		"MASTER_ADDR", "10.0.0.2", "MASTER_PORT", "29400"))
	if !ok || err != nil || e != (Env{Rank: 3, WorldSize: 8, LocalRank: 1, MasterAddr: "10.0.0.2",
		MasterPort: 29400}) || e.Addr() != "10.0.0.2:29400" {
		t.Errorf("torchrun: %+v %v %v", e, ok, err)
	}
	// Recent torchrun serves its own store on MASTER_PORT: lcc meets on the next.
	e, _, _ = EnvFrom(envOf("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "29400",
		"TORCHELASTIC_USE_AGENT_STORE", "True"))
	if e.Addr() != "h:29401" {
		t.Errorf("agent store: rendezvous at %s", e.Addr())
	}
	// LCC_COMM_SECRET reaches the rendezvous, and --comm-timeout bounds it with
	// no hidden floor (issue #23: it waited at least 60 s).
	e, _, _ = EnvFrom(envOf("RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "LCC_COMM_SECRET", "k"))
	if rv := e.rendezvous(3 * time.Second); string(rv.Secret) != "k" || rv.Timeout != 3*time.Second ||
		rv.Rank != 1 || rv.Size != 2 || rv.Addr != "h:29500" {
		t.Errorf("rendezvous config %+v", rv)
	}
	e, ok, err = EnvFrom(envOf("SLURM_PROCID", "5", "SLURM_NTASKS", "16", "SLURM_LOCALID", "1",
		"MASTER_ADDR", "node1"))
	if !ok || err != nil || e.Rank != 5 || e.WorldSize != 16 || e.LocalRank != 1 ||
		e.MasterPort != DefaultMasterPort {
		t.Errorf("srun: %+v %v %v", e, ok, err)
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"WORLD_SIZE", "2", "RANK", "x", "MASTER_ADDR", "h"}, `RANK="x"`},
		{[]string{"WORLD_SIZE", "2", "MASTER_ADDR", "h"}, "RANK is not"},
		{[]string{"WORLD_SIZE", "2", "RANK", "2", "MASTER_ADDR", "h"}, "RANK=2: want < WORLD_SIZE=2"},
		{[]string{"WORLD_SIZE", "2", "RANK", "1"}, "MASTER_ADDR is not set"},
		{[]string{"WORLD_SIZE", "2", "RANK", "1", "MASTER_ADDR", "h", "MASTER_PORT", "70000"}, "MASTER_PORT"},
		{[]string{"WORLD_SIZE", "0", "RANK", "0"}, "WORLD_SIZE=0"},
	} {
		_, ok, err := EnvFrom(envOf(c.env...))
		if !ok || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: ok %v, err %v; want %q", c.env, ok, err, c.want)
		}
	}
}

// TestRendezvousTimeout (issue #23): a rank whose rank 0 never comes fails
// after --comm-timeout, not after a hidden floor of 60 s.
func TestRendezvousTimeout(t *testing.T) {
	env := Env{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: freePort(t)}
	start := time.Now()
	_, err := Process(train.Config{}, env, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "cannot reach rank 0") || !strings.Contains(err.Error(), "300ms") {
		t.Errorf("err = %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the rendezvous gave up after %v, --comm-timeout is 300ms", took)
	}
}
