package platform

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// pod is an indexed Job's pod: its environment, host name and /etc/hosts.
func pod(m map[string]string, hostname, hosts string) Sources {
	return Sources{Getenv: env(m), Hostname: func() (string, error) { return hostname, nil }, Hosts: hosts}
}

// k8sHosts is an /etc/hosts as the kubelet writes it for a pod with a subdomain.
const k8sHosts = `# Kubernetes-managed hosts file.
127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
fe00::0	ip6-localnet
10.244.1.7	train-3.train.ml.svc.cluster.local	train-3
`

func TestDetect(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Detected
	}{
		{
			name: "none",
			env:  map[string]string{"HOME": "/root", "MASTER_ADDR": "10.0.0.1"},
			want: Detected{NodeRank: -1, From: map[string]string{}},
		},
		{
			name: "dstack all",
			env: map[string]string{
				"DSTACK_NODE_RANK":      "1",
				"DSTACK_MASTER_NODE_IP": "10.0.0.1",
				"DSTACK_NODES_NUM":      "2",
				"DSTACK_GPUS_PER_NODE":  "8",
				"DSTACK_NODES_IPS":      "10.0.0.1\n10.0.0.2\n",
			},
			want: Detected{
				Platform: Dstack, RdzvHost: "10.0.0.1", NNodes: 2, NodeRank: 1, GPUsPerNode: 8,
				NodeAddrs: []string{"10.0.0.1", "10.0.0.2"},
				From: map[string]string{
					"Platform": "DSTACK_NODE_RANK", "RdzvHost": "DSTACK_MASTER_NODE_IP", "NNodes": "DSTACK_NODES_NUM",
					"NodeRank": "DSTACK_NODE_RANK", "GPUsPerNode": "DSTACK_GPUS_PER_NODE", "NodeAddrs": "DSTACK_NODES_IPS",
				},
			},
		},
		{
			name: "dstack space separated ips without count",
			env:  map[string]string{"DSTACK_NODE_RANK": "0", "DSTACK_NODES_IPS": "10.0.0.1 10.0.0.2 10.0.0.3"},
			want: Detected{
				Platform: Dstack, NodeRank: 0, NodeAddrs: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"},
				From: map[string]string{"Platform": "DSTACK_NODE_RANK", "NodeRank": "DSTACK_NODE_RANK", "NodeAddrs": "DSTACK_NODES_IPS"},
			},
		},
		{
			name: "dstack rank only",
			env:  map[string]string{"DSTACK_NODE_RANK": "3"},
			want: Detected{Platform: Dstack, NodeRank: 3, From: map[string]string{"Platform": "DSTACK_NODE_RANK", "NodeRank": "DSTACK_NODE_RANK"}},
		},
		{
			name: "slurm all",
			env: map[string]string{
				"SLURM_JOB_ID":       "42",
				"SLURM_NODEID":       "1",
				"SLURM_NNODES":       "4",
				"SLURM_JOB_NODELIST": "gpu[01-04]",
				"SLURM_GPUS_ON_NODE": "8",
			},
			want: Detected{
				Platform: Slurm, RdzvHost: "gpu01", NNodes: 4, NodeRank: 1, GPUsPerNode: 8,
				From: map[string]string{
					"Platform": "SLURM_NODEID", "RdzvHost": "SLURM_JOB_NODELIST", "NNodes": "SLURM_NNODES",
					"NodeRank": "SLURM_NODEID", "GPUsPerNode": "SLURM_GPUS_ON_NODE",
				},
			},
		},
		{
			name: "slurm mixed nodelist",
			env:  map[string]string{"SLURM_JOB_ID": "42", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "cpu7,gpu[01-04]"},
			want: Detected{
				Platform: Slurm, RdzvHost: "cpu7", NodeRank: 0,
				From: map[string]string{"Platform": "SLURM_NODEID", "RdzvHost": "SLURM_JOB_NODELIST", "NodeRank": "SLURM_NODEID"},
			},
		},
		{
			name: "slurm node id without job id is not slurm",
			env:  map[string]string{"SLURM_NODEID": "0"},
			want: Detected{NodeRank: -1, From: map[string]string{}},
		},
		{
			name: "pytorchjob all",
			env: map[string]string{
				"PET_NODE_RANK":      "2",
				"MASTER_ADDR":        "job-master-0",
				"MASTER_PORT":        "23456",
				"PET_NNODES":         "4",
				"PET_NPROC_PER_NODE": "8",
			},
			want: Detected{
				Platform: PyTorchJob, RdzvHost: "job-master-0", RdzvPort: 23456, NNodes: 4, NodeRank: 2,
				From: map[string]string{
					"Platform": "PET_NODE_RANK", "RdzvHost": "MASTER_ADDR", "RdzvPort": "MASTER_PORT",
					"NNodes": "PET_NNODES", "NodeRank": "PET_NODE_RANK",
				},
			},
		},
		{
			name: "pytorchjob elastic without rank",
			env:  map[string]string{"MASTER_ADDR": "10.1.2.3", "PET_NNODES": "2:4"},
			want: Detected{
				Platform: PyTorchJob, RdzvHost: "10.1.2.3", NNodes: 4, MinNodes: 2, NodeRank: -1,
				From: map[string]string{"Platform": "PET_NNODES", "RdzvHost": "MASTER_ADDR", "NNodes": "PET_NNODES", "MinNodes": "PET_NNODES"},
			},
		},
		{
			name: "pytorchjob rank only",
			env:  map[string]string{"PET_NODE_RANK": "0"},
			want: Detected{Platform: PyTorchJob, NodeRank: 0, From: map[string]string{"Platform": "PET_NODE_RANK", "NodeRank": "PET_NODE_RANK"}},
		},
		{
			// The host comes from the pod (TestIndexedJobRdzvHost), not the environment.
			name: "indexed job all",
			env:  map[string]string{"JOB_COMPLETION_INDEX": "3", "MUSTER_RDZV_HOST": "train-0.train", "MUSTER_NNODES": "4"},
			want: Detected{
				Platform: KubernetesIndexedJob, NNodes: 4, NodeRank: 3,
				From: map[string]string{
					"Platform": "JOB_COMPLETION_INDEX", "NodeRank": "JOB_COMPLETION_INDEX", "NNodes": "MUSTER_NNODES",
				},
			},
		},
		{
			name: "indexed job index only",
			env:  map[string]string{"JOB_COMPLETION_INDEX": "0"},
			want: Detected{
				Platform: KubernetesIndexedJob, NodeRank: 0,
				From: map[string]string{"Platform": "JOB_COMPLETION_INDEX", "NodeRank": "JOB_COMPLETION_INDEX"},
			},
		},
		{
			name: "dstack wins over slurm and pytorchjob",
			env: map[string]string{
				"DSTACK_NODE_RANK": "0", "SLURM_JOB_ID": "1", "SLURM_NODEID": "5",
				"PET_NODE_RANK": "7", "JOB_COMPLETION_INDEX": "9",
			},
			want: Detected{Platform: Dstack, NodeRank: 0, From: map[string]string{"Platform": "DSTACK_NODE_RANK", "NodeRank": "DSTACK_NODE_RANK"}},
		},
		{
			name: "slurm wins over pytorchjob and indexed job",
			env:  map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODEID": "5", "PET_NODE_RANK": "7", "JOB_COMPLETION_INDEX": "9"},
			want: Detected{Platform: Slurm, NodeRank: 5, From: map[string]string{"Platform": "SLURM_NODEID", "NodeRank": "SLURM_NODEID"}},
		},
		{
			name: "pytorchjob wins over indexed job",
			env:  map[string]string{"PET_NODE_RANK": "7", "JOB_COMPLETION_INDEX": "9"},
			want: Detected{Platform: PyTorchJob, NodeRank: 7, From: map[string]string{"Platform": "PET_NODE_RANK", "NodeRank": "PET_NODE_RANK"}},
		},
		{
			name: "the winner's bad-looking neighbours are not read",
			env:  map[string]string{"JOB_COMPLETION_INDEX": "1", "MASTER_PORT": "x", "PET_NNODES": "x"},
			want: Detected{
				Platform: KubernetesIndexedJob, NodeRank: 1,
				From: map[string]string{"Platform": "JOB_COMPLETION_INDEX", "NodeRank": "JOB_COMPLETION_INDEX"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Detect(env(tt.env))
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Detect:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestIndexedJobRdzvHost(t *testing.T) {
	fqdn := "train-0.train.ml.svc.cluster.local"
	tests := []struct {
		name     string
		index    string
		hostname string
		hosts    string
		want     string // RdzvHost, "" when not derived
	}{
		{"pod with a subdomain", "3", "train-3", k8sHosts, fqdn},
		{"index 0 itself", "0", "train-0", "10.244.1.8 train-0.train.ml.svc.cluster.local train-0\n", fqdn},
		{"job name with dashes and digits", "12", "my-job-2-12", "10.0.0.1\tmy-job-2-12.sub.ns.svc.c.local my-job-2-12\n", "my-job-2-0.sub.ns.svc.c.local"},
		{"host name set as FQDN", "3", "train-3.train.ml.svc.cluster.local", "", fqdn},
		{"only the subdomain known", "1", "train-1", "10.0.0.5 train-1.train train-1\n", "train-0.train"},
		{"no subdomain: the name would not resolve", "1", "train-1", "10.0.0.5\ttrain-1\n", ""},
		{"no /etc/hosts", "1", "train-1", "", ""},
		{"host name of another index", "1", "train-2", "10.0.0.5 train-2.train train-2\n", ""},
		{"index a suffix of the number", "1", "train-11", "10.0.0.5 train-11.train train-11\n", ""},
		{"host name is only the index", "1", "-1", "10.0.0.5 -1.train -1\n", ""},
		{"not a pod of a Job", "0", "laptop", "127.0.1.1 laptop.lan laptop\n", ""},
		{"commented-out entry", "1", "train-1", "# 10.0.0.5 train-1.evil train-1\n", ""},
		{"another host's entry", "1", "train-1", "10.0.0.5 train-10.train train-10\n", ""},
		{"bad domain", "1", "train-1", "10.0.0.5 train-1.a..b train-1\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DetectFrom(pod(map[string]string{"JOB_COMPLETION_INDEX": tt.index}, tt.hostname, tt.hosts))
			if err != nil {
				t.Fatal(err)
			}
			if got.RdzvHost != tt.want {
				t.Errorf("RdzvHost %q, want %q", got.RdzvHost, tt.want)
			}
			if from, want := got.From["RdzvHost"], "hostname and /etc/hosts"; (from == want) != (tt.want != "") || (from != "" && from != want) {
				t.Errorf("From[RdzvHost] %q with RdzvHost %q", from, got.RdzvHost)
			}
		})
	}
}

// The pod's names are read for an indexed Job only, and a host name that
// cannot be read leaves the host unknown.
func TestPodNamesOnlyForIndexedJob(t *testing.T) {
	slurm := map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[01-02]", "JOB_COMPLETION_INDEX": "3"}
	if d, err := DetectFrom(pod(slurm, "train-3", k8sHosts)); err != nil || d.RdzvHost != "gpu01" {
		t.Errorf("slurm: %+v, %v", d, err)
	}
	failing := Sources{Getenv: env(map[string]string{"JOB_COMPLETION_INDEX": "3"}), Hosts: k8sHosts,
		Hostname: func() (string, error) { return "", errors.New("no host name") }}
	if d, err := DetectFrom(failing); err != nil || d.RdzvHost != "" || d.NodeRank != 3 {
		t.Errorf("failing host name: %+v, %v", d, err)
	}
}

func TestDetectErrors(t *testing.T) {
	long := strings.Repeat("1", MaxValueLen+1)
	tests := []struct {
		name string
		env  map[string]string
		want []string // substrings of the error
	}{
		{"dstack rank not a number", map[string]string{"DSTACK_NODE_RANK": "x"}, []string{`DSTACK_NODE_RANK="x": not a whole number`}},
		{"dstack rank negative", map[string]string{"DSTACK_NODE_RANK": "-1"}, []string{`DSTACK_NODE_RANK="-1": not a whole number`}},
		{"dstack rank too large", map[string]string{"DSTACK_NODE_RANK": "99999999999999999999999"}, []string{`DSTACK_NODE_RANK=`, "too large"}},
		{"dstack rank above max", map[string]string{"DSTACK_NODE_RANK": "10000"}, []string{`DSTACK_NODE_RANK="10000": out of range`}},
		{"dstack master not ip", map[string]string{"DSTACK_NODE_RANK": "0", "DSTACK_MASTER_NODE_IP": "host"}, []string{`DSTACK_MASTER_NODE_IP="host": not an IP address`}},
		{"dstack nodes zero", map[string]string{"DSTACK_NODE_RANK": "0", "DSTACK_NODES_NUM": "0"}, []string{`DSTACK_NODES_NUM="0": out of range 1..10000`}},
		{"dstack nodes too many", map[string]string{"DSTACK_NODE_RANK": "0", "DSTACK_NODES_NUM": "10001"}, []string{`DSTACK_NODES_NUM="10001"`}},
		{"dstack gpus bad", map[string]string{"DSTACK_NODE_RANK": "0", "DSTACK_GPUS_PER_NODE": "8x"}, []string{`DSTACK_GPUS_PER_NODE="8x": not a whole number`}},
		{"dstack ips bad", map[string]string{"DSTACK_NODE_RANK": "0", "DSTACK_NODES_IPS": "10.0.0.1 nope"}, []string{`DSTACK_NODES_IPS=`, `"nope" is not an IP address`}},
		{"dstack ips count mismatch", map[string]string{"DSTACK_NODE_RANK": "0", "DSTACK_NODES_NUM": "3", "DSTACK_NODES_IPS": "10.0.0.1\n10.0.0.2"}, []string{`DSTACK_NODES_IPS=`, `2 addresses, but DSTACK_NODES_NUM="3"`}},
		{"dstack rank not below nodes", map[string]string{"DSTACK_NODE_RANK": "2", "DSTACK_NODES_NUM": "2"}, []string{`DSTACK_NODE_RANK="2"`, `DSTACK_NODES_NUM="2"`}},
		{"value too long", map[string]string{"DSTACK_NODE_RANK": "0", "DSTACK_GPUS_PER_NODE": long}, []string{"DSTACK_GPUS_PER_NODE", "longer than 4096"}},

		{"slurm nodeid bad", map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODEID": "a"}, []string{`SLURM_NODEID="a": not a whole number`}},
		{"slurm nnodes bad", map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODEID": "0", "SLURM_NNODES": " 2"}, []string{`SLURM_NNODES=" 2": not a whole number`}},
		{"slurm gpus bad", map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODEID": "0", "SLURM_GPUS_ON_NODE": "10001"}, []string{`SLURM_GPUS_ON_NODE="10001": out of range 0..10000`}},
		{"slurm nodelist bad", map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "gpu[04-01]"}, []string{`SLURM_JOB_NODELIST="gpu[04-01]"`}},
		{"slurm rank not below nodes", map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODEID": "4", "SLURM_NNODES": "4"}, []string{`SLURM_NODEID="4"`, `SLURM_NNODES="4"`}},

		{"pet rank bad", map[string]string{"PET_NODE_RANK": "one"}, []string{`PET_NODE_RANK="one": not a whole number`}},
		{"pet nnodes bad", map[string]string{"PET_NODE_RANK": "0", "PET_NNODES": "x"}, []string{`PET_NNODES="x": not a whole number`}},
		{"pet nnodes min bad", map[string]string{"PET_NODE_RANK": "0", "PET_NNODES": "x:4"}, []string{`PET_NNODES="x:4": minimum not a whole number`}},
		{"pet nnodes max bad", map[string]string{"PET_NODE_RANK": "0", "PET_NNODES": "2:"}, []string{`PET_NNODES="2:": maximum not a whole number`}},
		{"pet nnodes min above max", map[string]string{"PET_NODE_RANK": "0", "PET_NNODES": "4:2"}, []string{`PET_NNODES="4:2": minimum above maximum`}},
		{"pet nnodes zero min", map[string]string{"PET_NODE_RANK": "0", "PET_NNODES": "0:2"}, []string{`PET_NNODES="0:2": minimum out of range`}},
		{"pet master bad", map[string]string{"MASTER_ADDR": "a b", "PET_NNODES": "2"}, []string{`MASTER_ADDR="a b": not a host name or address`}},
		{"pet master hostlist", map[string]string{"MASTER_ADDR": "n[1-2]", "PET_NNODES": "2"}, []string{`MASTER_ADDR="n[1-2]"`}},
		{"pet port bad", map[string]string{"PET_NODE_RANK": "0", "MASTER_PORT": "http"}, []string{`MASTER_PORT="http": not a whole number`}},
		{"pet port zero", map[string]string{"PET_NODE_RANK": "0", "MASTER_PORT": "0"}, []string{`MASTER_PORT="0": port out of range`}},
		{"pet port too high", map[string]string{"PET_NODE_RANK": "0", "MASTER_PORT": "65536"}, []string{`MASTER_PORT="65536": port out of range`}},
		{"pet rank not below elastic max", map[string]string{"PET_NODE_RANK": "4", "PET_NNODES": "2:4"}, []string{`PET_NODE_RANK="4"`, `PET_NNODES="2:4"`}},

		{"index bad", map[string]string{"JOB_COMPLETION_INDEX": "1.0"}, []string{`JOB_COMPLETION_INDEX="1.0": not a whole number`}},
		{"index nnodes bad", map[string]string{"JOB_COMPLETION_INDEX": "0", "MUSTER_NNODES": "many"}, []string{`MUSTER_NNODES="many": not a whole number`}},
		{"index not below nnodes", map[string]string{"JOB_COMPLETION_INDEX": "2", "MUSTER_NNODES": "2"}, []string{`JOB_COMPLETION_INDEX="2"`, `MUSTER_NNODES="2"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Detect(env(tt.env))
			if err == nil {
				t.Fatalf("Detect: no error, got %+v", d)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if d.Platform != "" || d.NodeRank != -1 {
				t.Errorf("Detect with error returned %+v", d)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		hostname string
		want     []string
	}{
		{"none", nil, "", []string{"nothing detected: no platform variables set"}},
		{
			"slurm",
			map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "4", "SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_GPUS_ON_NODE": "8"}, "",
			[]string{
				"platform: slurm (SLURM_NODEID)",
				"node rank: 1 (from SLURM_NODEID)",
				"rendezvous host: gpu01 (first host of SLURM_JOB_NODELIST)",
				"nodes: 4 (from SLURM_NNODES)",
				"GPUs per node: 8 (from SLURM_GPUS_ON_NODE)",
			},
		},
		{
			"pytorchjob elastic",
			map[string]string{"MASTER_ADDR": "m0", "MASTER_PORT": "29500", "PET_NNODES": "2:4"}, "",
			[]string{
				"platform: pytorchjob (PET_NNODES)",
				"rendezvous host: m0 (from MASTER_ADDR)",
				"rendezvous port: 29500 (from MASTER_PORT)",
				"nodes: 4 (from PET_NNODES)",
				"minimum nodes (elastic): 2 (from PET_NNODES)",
			},
		},
		{
			"dstack",
			map[string]string{"DSTACK_NODE_RANK": "0", "DSTACK_NODES_IPS": "10.0.0.1 10.0.0.2"}, "",
			[]string{
				"platform: dstack (DSTACK_NODE_RANK)",
				"node rank: 0 (from DSTACK_NODE_RANK)",
				"node addresses: 10.0.0.1 10.0.0.2 (from DSTACK_NODES_IPS)",
			},
		},
		{
			"indexed job",
			map[string]string{"JOB_COMPLETION_INDEX": "3", "MUSTER_NNODES": "4"}, "train-3",
			[]string{
				"platform: kubernetes-indexed-job (JOB_COMPLETION_INDEX)",
				"node rank: 3 (from JOB_COMPLETION_INDEX)",
				"rendezvous host: train-0.train.ml.svc.cluster.local (index 0's pod, named from this pod's hostname and /etc/hosts)",
				"nodes: 4 (from MUSTER_NNODES)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := DetectFrom(pod(tt.env, tt.hostname, k8sHosts))
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Describe(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Describe:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func FuzzDetect(f *testing.F) {
	f.Add("1", "gpu[01-04]", "4", "2:4", "10.0.0.1\n10.0.0.2", "29500", "8", "", "", uint8(0))
	f.Add("0", "m0", "2", "1:3", "10.0.0.1", "1", "1", "", "", uint8(1))
	f.Add("x", "", "0", ":", " ", "65536", "-1", "", "", uint8(2))
	f.Add("3", "h", "4", "4", "", "", "", "train-3", k8sHosts, uint8(3))
	f.Add("1", "", "", "", "", "", "", "a-1.b.c", "", uint8(3))
	f.Add("1", "", "2", "", "", "", "", "a-1", "1.2.3.4 a-1.x..y a-1\n5.6.7.8 a-1.[z] #a-1.w", uint8(3))
	f.Fuzz(func(t *testing.T, rank, host, nnodes, petNNodes, ips, port, gpus, hostname, hosts string, which uint8) {
		// which picks the platform whose key is set, so that every
		// platform's reading gets random values.
		m := map[string]string{}
		switch which % 4 {
		case 0:
			m["DSTACK_NODE_RANK"], m["DSTACK_MASTER_NODE_IP"], m["DSTACK_NODES_NUM"] = rank, host, nnodes
			m["DSTACK_NODES_IPS"], m["DSTACK_GPUS_PER_NODE"] = ips, gpus
		case 1:
			m["SLURM_JOB_ID"], m["SLURM_NODEID"], m["SLURM_JOB_NODELIST"] = "1", rank, host
			m["SLURM_NNODES"], m["SLURM_GPUS_ON_NODE"] = nnodes, gpus
		case 2:
			m["PET_NODE_RANK"], m["MASTER_ADDR"], m["MASTER_PORT"], m["PET_NNODES"] = rank, host, port, petNNodes
		case 3:
			m["JOB_COMPLETION_INDEX"], m["MUSTER_NNODES"] = rank, nnodes
		}
		d, err := DetectFrom(pod(m, hostname, hosts))
		if err != nil {
			return
		}
		checkBounds(t, d)
		if d.Platform == KubernetesIndexedJob && d.RdzvHost != "" {
			first, _, _ := strings.Cut(d.RdzvHost, ".")
			if !strings.HasSuffix(first, "-0") || !strings.Contains(d.RdzvHost, ".") || !validHost(d.RdzvHost) {
				t.Fatalf("not index 0's FQDN: %+v (hostname %q)", d, hostname)
			}
		}
		_ = d.Describe()
	})
}

func checkBounds(t *testing.T, d Detected) {
	t.Helper()
	inCount := func(n int) bool { return n == 0 || n >= 1 && n <= MaxCount }
	switch {
	case !inCount(d.NNodes), !inCount(d.GPUsPerNode), !inCount(d.MinNodes):
		t.Fatalf("count out of bounds: %+v", d)
	case d.MinNodes > 0 && d.MinNodes > d.NNodes:
		t.Fatalf("minimum above maximum: %+v", d)
	case d.RdzvPort < 0 || d.RdzvPort > 65535:
		t.Fatalf("port out of bounds: %+v", d)
	case d.NodeRank < -1 || d.NodeRank >= MaxCount:
		t.Fatalf("rank out of bounds: %+v", d)
	case d.NNodes > 0 && d.NodeRank >= d.NNodes:
		t.Fatalf("rank not below node count: %+v", d)
	case len(d.RdzvHost) > MaxValueLen:
		t.Fatalf("host too long: %+v", d)
	case len(d.NodeAddrs) > 0 && d.NNodes > 0 && len(d.NodeAddrs) != d.NNodes:
		t.Fatalf("addresses and node count disagree: %+v", d)
	case d.Platform == "" && (d.NodeRank != -1 || len(d.From) != 0):
		t.Fatalf("fields set with no platform: %+v", d)
	}
	for field := range d.From {
		if d.From[field] == "" {
			t.Fatalf("empty source for %s: %+v", field, d)
		}
	}
}

// A CPU-only Slurm step says it has no GPUs: that is no error.
func TestSlurmWithoutGPUs(t *testing.T) {
	env := map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODEID": "0", "SLURM_GPUS_ON_NODE": "0"}
	d, err := Detect(func(k string) string { return env[k] })
	if err != nil || d.GPUsPerNode != 0 || d.From["GPUsPerNode"] != "SLURM_GPUS_ON_NODE" {
		t.Fatalf("%+v, %v", d, err)
	}
}
