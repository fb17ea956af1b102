package envprop

// The names of the variables muster sets for workers, in one place: Build
// writes them and the engine, which workers link, reads them.
const (
	// torchrun's
	Rank                     = "RANK"
	LocalRank                = "LOCAL_RANK"
	WorldSize                = "WORLD_SIZE"
	LocalWorldSize           = "LOCAL_WORLD_SIZE"
	GroupRank                = "GROUP_RANK"
	GroupWorldSize           = "GROUP_WORLD_SIZE"
	RoleRank                 = "ROLE_RANK"
	RoleWorldSize            = "ROLE_WORLD_SIZE"
	RoleName                 = "ROLE_NAME"
	MasterAddr               = "MASTER_ADDR"
	MasterPort               = "MASTER_PORT"
	TorchelasticRunID        = "TORCHELASTIC_RUN_ID"
	TorchelasticRestartCount = "TORCHELASTIC_RESTART_COUNT"
	TorchelasticMaxRestarts  = "TORCHELASTIC_MAX_RESTARTS"
	TorchelasticAgentStore   = "TORCHELASTIC_USE_AGENT_STORE"
	TorchelasticErrorFile    = "TORCHELASTIC_ERROR_FILE"
	TorchNCCLAsyncErrors     = "TORCH_NCCL_ASYNC_ERROR_HANDLING"

	// Open MPI's, which many tools read without MPI
	OMPIRank      = "OMPI_COMM_WORLD_RANK"
	OMPISize      = "OMPI_COMM_WORLD_SIZE"
	OMPILocalRank = "OMPI_COMM_WORLD_LOCAL_RANK"
	OMPILocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE"
	OMPINodeRank  = "OMPI_COMM_WORLD_NODE_RANK"

	// MPICH's PMI-1 client (in libmpich), as Hydra sets them; only under --mpi
	PMIFD          = "PMI_FD"
	PMIRank        = "PMI_RANK"
	PMISize        = "PMI_SIZE"
	MPILocalNRanks = "MPI_LOCALNRANKS"
	MPILocalRankID = "MPI_LOCALRANKID"

	// muster's
	JobID     = "MUSTER_JOB_ID"
	NodeRank  = "MUSTER_NODE_RANK"
	NNodes    = "MUSTER_NNODES"
	NodeAddrs = "MUSTER_NODE_ADDRS"
	// NodeAddrsFileVar names the file of the addresses, where they are too
	// many for a variable.
	NodeAddrsFileVar = "MUSTER_NODE_ADDRS_FILE"
	MusterMaster     = "MUSTER_MASTER_ADDR"
	GPUsPerNode      = "MUSTER_GPUS_PER_NODE"
	NCCLUniqueID     = "MUSTER_NCCL_UNIQUE_ID"
	Hostfile         = "MUSTER_HOSTFILE"
	StoreAddr        = "MUSTER_STORE_ADDR"
	JobToken         = "MUSTER_JOB_TOKEN"
	TLSCA            = "MUSTER_TLS_CA"
	LocalGPUs        = "MUSTER_LOCAL_GPUS"
	ClusterToken     = "MUSTER_TOKEN"
	// An Open MPI job's workers' (--mpi openmpi): which node and round they
	// launch for, the keys of the job's KV they meet at.
	NodeName  = "MUSTER_NODE_NAME"
	RoundID   = "MUSTER_ROUND_ID"
	TokenFile = "MUSTER_TOKEN_FILE"
	// HeartbeatFile is the file a worker touches to show progress, under
	// --hang-timeout.
	HeartbeatFile = "MUSTER_HEARTBEAT_FILE"

	// What dumps a hung worker's state (--hang-timeout): Python's stacks on
	// SIGABRT, PyTorch's NCCL flight recorder on a write to its pipe.
	PythonFaultHandler   = "PYTHONFAULTHANDLER"
	TorchTraceBufferSize = "TORCH_NCCL_TRACE_BUFFER_SIZE"
	TorchFRBufferSize    = "TORCH_FR_BUFFER_SIZE"
	TorchDumpOnTimeout   = "TORCH_NCCL_DUMP_ON_TIMEOUT"
	TorchDumpPipe        = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
	TorchDumpFile        = "TORCH_FR_DUMP_TEMP_FILE"
	TorchDumpFileOld     = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
	TorchDumpStacks      = "TORCH_INCLUDE_STACK_TRACE"

	// CUDA's and NCCL's
	CUDAVisibleDevices = "CUDA_VISIBLE_DEVICES"
	CUDADeviceOrder    = "CUDA_DEVICE_ORDER"
	NCCLCommID         = "NCCL_COMM_ID"
	// NCCL's RAS service: where a node's NCCL processes of a job answer
	// its clients, and whether they run it.
	NCCLRASAddr   = "NCCL_RAS_ADDR"
	NCCLRASEnable = "NCCL_RAS_ENABLE"
)
