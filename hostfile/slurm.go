package hostfile

import "fmt"

// FromSlurm builds the host list of the Slurm allocation this process runs
// in: names from SLURM_JOB_NODELIST (or the older SLURM_NODELIST), slots from
// SLURM_TASKS_PER_NODE, which is what Open MPI also reads. Without task counts
// every host has Slots 0 (not given). Outside an allocation it returns
// ErrNoHosts. getenv is os.Getenv, or a map lookup in tests.
func FromSlurm(getenv func(string) string) ([]Host, error) {
	listVar := "SLURM_JOB_NODELIST"
	list := getenv(listVar)
	if list == "" {
		listVar = "SLURM_NODELIST"
		list = getenv(listVar)
	}
	if list == "" {
		return nil, ErrNoHosts
	}
	names, err := Expand(list)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", listVar, err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: no hosts in %q", listVar, list)
	}
	var counts []int
	if tasks := getenv("SLURM_TASKS_PER_NODE"); tasks != "" {
		if counts, err = ParseTasksPerNode(tasks); err != nil {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE: %w", err)
		}
		if len(counts) != len(names) {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE gives %d counts for the %d hosts of %s",
				len(counts), len(names), listVar)
		}
	}
	var set hostSet
	for i, name := range names {
		if set.find(name) != nil {
			return nil, fmt.Errorf("%s: host %s is listed twice", listVar, name)
		}
		h := Host{Name: name}
		if counts != nil {
			h.Slots = counts[i]
		}
		if err := set.add(h); err != nil {
			return nil, fmt.Errorf("%s: %w", listVar, err)
		}
	}
	return set.hosts, nil
}
