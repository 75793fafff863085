package runner

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/lcc-dev/lcc/runtime/comm/nccl"
	"github.com/lcc-dev/lcc/runtime/comm/rendezvous"
	"github.com/lcc-dev/lcc/runtime/comm/tcp"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train"
)

// Env is where a launcher placed this process: torchrun sets RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR and MASTER_PORT; under srun, SLURM_PROCID,
// SLURM_NTASKS and SLURM_LOCALID stand in for the first three, and the job
// script exports MASTER_ADDR (MASTER_PORT defaults to torchrun's 29500).
type Env struct {
	Rank, WorldSize, LocalRank int
	MasterAddr                 string
	MasterPort                 int
	// AgentStore is set when torchrun's agent already serves its TCPStore on
	// MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True, the default of recent
	// torchrun): lcc does not speak the TCPStore protocol, so its rendezvous
	// listens on MASTER_PORT+1 instead.
	AgentStore bool
	// Secret is LCC_COMM_SECRET: when set (the same on every rank), the ranks
	// prove to each other at the rendezvous that they hold it, so a stranger
	// that reaches MASTER_PORT cannot take a rank.
	Secret string
}

// rendezvous is the rendezvous of env's rank, bounded by timeout.
func (e Env) rendezvous(timeout time.Duration) rendezvous.Config {
	return rendezvous.Config{Addr: e.Addr(), Rank: e.Rank, Size: e.WorldSize, Timeout: timeout,
		Secret: []byte(e.Secret)}
}

// Addr is rank 0's rendezvous address: MASTER_ADDR:MASTER_PORT, or the port
// after it when torchrun's agent holds MASTER_PORT.
func (e Env) Addr() string {
	port := e.MasterPort
	if e.AgentStore {
		port++
	}
	return net.JoinHostPort(e.MasterAddr, strconv.Itoa(port))
}

// DefaultMasterPort is torchrun's default MASTER_PORT.
const DefaultMasterPort = 29500

// EnvFrom reads the launcher's variables through getenv (os.Getenv). ok is false
// when no launcher started this process (neither WORLD_SIZE nor SLURM_NTASKS is
// set); a variable that is set but malformed is an error naming it.
func EnvFrom(getenv func(string) string) (env Env, ok bool, err error) {
	pick := func(names ...string) (string, string) {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return n, v
			}
		}
		return names[0], ""
	}
	num := func(dflt int, names ...string) int {
		name, v := pick(names...)
		if v == "" || err != nil {
			return dflt
		}
		n, e := strconv.Atoi(v)
		if e != nil || n < 0 {
			err = fmt.Errorf("%s=%q: want a number >= 0", name, v)
		}
		return n
	}
	if _, v := pick("WORLD_SIZE", "SLURM_NTASKS"); v == "" {
		return Env{}, false, nil
	}
	env.WorldSize = num(0, "WORLD_SIZE", "SLURM_NTASKS")
	env.Rank = num(-1, "RANK", "SLURM_PROCID")
	env.LocalRank = num(0, "LOCAL_RANK", "SLURM_LOCALID")
	env.MasterPort = num(DefaultMasterPort, "MASTER_PORT")
	_, env.MasterAddr = pick("MASTER_ADDR")
	env.AgentStore = getenv("TORCHELASTIC_USE_AGENT_STORE") == "True"
	env.Secret = getenv(rendezvous.SecretVar)
	switch {
	case err != nil:
		return env, true, err
	case env.WorldSize < 1:
		return env, true, fmt.Errorf("WORLD_SIZE=%d: want >= 1", env.WorldSize)
	case env.Rank < 0:
		return env, true, fmt.Errorf("WORLD_SIZE=%d is set but RANK is not", env.WorldSize)
	case env.Rank >= env.WorldSize:
		return env, true, fmt.Errorf("RANK=%d: want < WORLD_SIZE=%d", env.Rank, env.WorldSize)
	case env.MasterAddr == "" && env.WorldSize > 1:
		return env, true, fmt.Errorf("WORLD_SIZE=%d: MASTER_ADDR is not set (rank 0's host)",
			env.WorldSize)
	case env.MasterPort < 1 || env.MasterPort > 65535 || (env.AgentStore && env.MasterPort == 65535):
		return env, true, fmt.Errorf("MASTER_PORT=%d: want 1..65535 (below 65535 when "+
			"TORCHELASTIC_USE_AGENT_STORE=True: lcc meets on the port after it)", env.MasterPort)
	}
	return env, true, nil
}

// Process trains cfg as rank env.Rank of env.WorldSize processes: it meets the
// others at env.Addr() (waiting at most timeout), connects to
// them with the TCP communicator (whose watchdog is timeout, DefaultTimeout when
// 0) and runs its rank of the step.
// cfg.Ranks must be 0 (take WORLD_SIZE) or WORLD_SIZE. When the run fails, the
// other ranks are told why; the error names this rank.
func Process(cfg train.Config, env Env, timeout time.Duration) (*train.Result, error) {
	if cfg.Ranks > 1 && cfg.Ranks != env.WorldSize {
		return nil, fmt.Errorf("--ranks=%d, but the launcher started WORLD_SIZE=%d processes", cfg.Ranks,
			env.WorldSize)
	}
	cfg.Ranks = env.WorldSize
	if env.WorldSize == 1 {
		return train.Train(cfg)
	}
	timeout = orDefault(timeout)
	// --comm-timeout bounds the rendezvous too, as its help says: a launcher
	// that starts the processes far apart needs a longer one.
	c, err := tcp.Connect(tcp.Config{Config: env.rendezvous(timeout), Watchdog: timeout})
	if err != nil {
		return nil, err
	}
	cfg.Comm = c
	res, err := train.Train(cfg)
	if err != nil {
		err = fmt.Errorf("rank %d: %w", env.Rank, err)
		c.Abort(err)
		return nil, err
	}
	return res, c.Close()
}

// ProcessGPU is Process on GPU LOCAL_RANK: the ranks meet through the rendezvous,
// rank 0's NCCL unique id reaches every rank over the TCP mesh (which stays open
// to name a rank that dies), and the step runs on the GPU executor with its
// collectives on NCCL (exec.Options.Comm), storing f32 values as storage.
// WORLD_SIZE=1 runs the step sharded for one rank through a one-rank NCCL
// communicator. The watchdog of both the mesh and NCCL is timeout.
func ProcessGPU(cfg train.Config, env Env, timeout time.Duration, storage tensor.DType) (*train.Result, error) {
	if cfg.Ranks > 1 && cfg.Ranks != env.WorldSize {
		return nil, fmt.Errorf("--ranks=%d, but the launcher started WORLD_SIZE=%d processes", cfg.Ranks,
			env.WorldSize)
	}
	timeout = orDefault(timeout)
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("--device=cuda: %w", err)
	}
	dev, err := cuda.Open(env.LocalRank % max(n, 1))
	if err != nil {
		return nil, fmt.Errorf("--device=cuda: LOCAL_RANK=%d: %w", env.LocalRank, err)
	}
	defer dev.Close()
	nc, mesh, err := nccl.Join(dev, tcp.Config{Config: env.rendezvous(timeout), Watchdog: timeout},
		nccl.Options{Timeout: timeout})
	if err != nil {
		return nil, err
	}
	step := exec.NewSession(dev, exec.Options{Storage: storage, Comm: nc})
	opt := step
	if storage != tensor.F32 {
		// Master weights, moments and gradient sums stay fp32.
		opt = exec.NewSession(dev, exec.Options{Storage: tensor.F32})
	}
	cfg.Ranks, cfg.Comm, cfg.Run, cfg.RunOptimizer, cfg.Adopt = env.WorldSize, nc, step.Run, opt.Run, step.Adopt
	cfg.GPU = step.GPU()
	res, err := train.Train(cfg)
	if opt != step {
		opt.Close()
	}
	step.Close()
	if err != nil {
		err = fmt.Errorf("rank %d: %w", env.Rank, err)
		mesh.Abort(err) // the other ranks learn why
		nc.Abort(err)
		return nil, err
	}
	return res, errors.Join(nc.Close(), mesh.Close())
}
