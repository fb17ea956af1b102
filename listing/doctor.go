package listing

import (
	"fmt"
	"io"
)

// Doctor is what `launcher doctor -o json|yaml` writes: the NCCL network
// settings workers on this node would get, and why.
type Doctor struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"` // Doctor
	// Master is the job's master address; null when not given.
	Master *string `json:"master" yaml:"master"`
	// NCCLVersion is the NCCL version detection assumed, "" when unknown;
	// NCCLVersionFrom says where it came from: flag, library or none, and
	// NCCLLibraryError why the library was not loaded.
	NCCLVersion      string `json:"ncclVersion" yaml:"ncclVersion"`
	NCCLVersionFrom  string `json:"ncclVersionFrom" yaml:"ncclVersionFrom"`
	NCCLLibraryError string `json:"ncclLibraryError" yaml:"ncclLibraryError"`
	// Detected are the variables detection sets where the user did not,
	// each with "" when it sets none.
	Detected []Variable `json:"detected" yaml:"detected"`
	Reasons  []string   `json:"reasons" yaml:"reasons"`
	// UserVariables are the user's own NCCL_* variables, by name; they win.
	UserVariables []Variable `json:"userVariables" yaml:"userVariables"`
	// Platform is what the environment says of a multi-node job, one line
	// a fact; PlatformError why it could not be read.
	Platform      []string `json:"platform" yaml:"platform"`
	PlatformError string   `json:"platformError" yaml:"platformError"`
	// Topology is this node's hardware as an agent here reads it.
	Topology *Topology `json:"topology" yaml:"topology"`
	// Fabric is the node's place in the network an agent here would
	// register (block=b1,switch=s3), "" for none; FabricFrom says where it
	// came from (MUSTER_TOPOLOGY, scontrol show topology, NVML GPU fabric)
	// and FabricError why MUSTER_TOPOLOGY was refused.
	Fabric      string `json:"fabric" yaml:"fabric"`
	FabricFrom  string `json:"fabricFrom" yaml:"fabricFrom"`
	FabricError string `json:"fabricError" yaml:"fabricError"`
}

// Variable is an environment variable and its value.
type Variable struct {
	Name  string `json:"name" yaml:"name"`
	Value string `json:"value" yaml:"value"`
}

// NewDoctor is an empty report, its lists empty rather than null.
func NewDoctor() Doctor {
	return Doctor{APIVersion: APIVersion, Kind: "Doctor", NCCLVersionFrom: "none", Detected: []Variable{},
		Reasons: []string{}, UserVariables: []Variable{}, Platform: []string{}}
}

// WriteDoctor writes the report in f; the tables are the text people read.
func WriteDoctor(w io.Writer, f Format, d Doctor) error {
	if f.Structured() {
		return Write(w, f, d)
	}
	if d.Master != nil {
		fmt.Fprintf(w, "master:        %s\n", *d.Master)
	} else {
		fmt.Fprintln(w, "master:        unknown (give --master or MASTER_ADDR)")
	}
	switch {
	case d.NCCLVersionFrom == "flag":
		fmt.Fprintf(w, "NCCL version:  %s (from --nccl-version)\n", d.NCCLVersion)
	case d.NCCLVersion != "":
		fmt.Fprintf(w, "NCCL version:  %s\n", d.NCCLVersion)
	default:
		fmt.Fprintf(w, "NCCL version:  unknown (library not loaded: %s)\n", d.NCCLLibraryError)
	}
	fmt.Fprintln(w, "\ndetected (set only where you did not set the variable):")
	for _, v := range d.Detected {
		fmt.Fprintf(w, "  %-20s %s\n", v.Name, cmpOr(v.Value, "not set"))
	}
	fmt.Fprintln(w, "\nwhy:")
	for _, r := range d.Reasons {
		fmt.Fprintf(w, "  - %s\n", r)
	}
	fmt.Fprintln(w, "\nyour NCCL_* variables (these win over detection):")
	if len(d.UserVariables) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, v := range d.UserVariables {
		fmt.Fprintf(w, "  %s=%s\n", v.Name, v.Value)
	}
	if d.PlatformError != "" {
		fmt.Fprintf(w, "\nplatform: %s\n", d.PlatformError)
	} else {
		fmt.Fprintln(w, "\nplatform:")
		for _, line := range d.Platform {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	switch {
	case d.FabricError != "":
		fmt.Fprintf(w, "\nfabric: %s\n", d.FabricError)
	case d.Fabric != "":
		fmt.Fprintf(w, "\nfabric: %s (from %s)\n", d.Fabric, d.FabricFrom)
	default:
		fmt.Fprintln(w, "\nfabric: none (agent --topology, Slurm's topology or the GPUs' NVLink fabric give it)")
	}
	if d.Topology != nil {
		fmt.Fprintln(w, "\ntopology (from sysfs):")
		writeTopology(w, d.Topology)
	}
	return nil
}

func cmpOr(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}
