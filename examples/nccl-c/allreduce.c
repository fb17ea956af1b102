/*
 * One device per process, muster style: NCCL's "one device per process"
 * example with the MPI parts replaced by muster's environment. Every rank
 * reads the same unique ID from MUSTER_NCCL_UNIQUE_ID, so no MPI_Bcast is
 * needed; rank 0 also has NCCL_COMM_ID, where its ncclCommInitRank starts
 * the bootstrap root.
 *
 *   launcher run --gpus 2 -- ./allreduce
 *
 * With --loop it all-reduces for ever, touching $MUSTER_HEARTBEAT_FILE
 * before each one: a job for --hang-timeout without PyTorch.
 *
 *   launcher run --gpus 4 --hang-timeout 5s -- ./allreduce --loop
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDACHECK(cmd) do {                                   \
  cudaError_t e = (cmd);                                      \
  if (e != cudaSuccess) {                                     \
    fprintf(stderr, "%s:%d cuda: %s\n", __FILE__, __LINE__,   \
            cudaGetErrorString(e));                           \
    exit(EXIT_FAILURE);                                       \
  }                                                           \
} while (0)

#define NCCLCHECK(cmd) do {                                   \
  ncclResult_t r = (cmd);                                     \
  if (r != ncclSuccess) {                                     \
    fprintf(stderr, "%s:%d nccl: %s\n", __FILE__, __LINE__,   \
            ncclGetErrorString(r));                           \
    exit(EXIT_FAILURE);                                       \
  }                                                           \
} while (0)

static int env_int(const char *name) {
  const char *v = getenv(name);
  char *end;
  long n;
  if (v == NULL || *v == '\0') {
    fprintf(stderr, "%s is not set; run this under `launcher run`\n", name);
    exit(EXIT_FAILURE);
  }
  n = strtol(v, &end, 10);
  if (*end != '\0' || n < 0) {
    fprintf(stderr, "%s=%s is not a non-negative integer\n", name, v);
    exit(EXIT_FAILURE);
  }
  return (int)n;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The ID travels as 256 hex digits: the 128 bytes of ncclUniqueId. */
static void unique_id_from_env(ncclUniqueId *id) {
  const char *hex = getenv("MUSTER_NCCL_UNIQUE_ID");
  size_t i;
  if (hex == NULL) {
    fprintf(stderr, "MUSTER_NCCL_UNIQUE_ID is not set; run this under `launcher run`\n");
    exit(EXIT_FAILURE);
  }
  if (strlen(hex) != 2 * sizeof(id->internal)) {
    fprintf(stderr, "MUSTER_NCCL_UNIQUE_ID: want %zu hex digits, got %zu\n",
            2 * sizeof(id->internal), strlen(hex));
    exit(EXIT_FAILURE);
  }
  for (i = 0; i < sizeof(id->internal); i++) {
    int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      fprintf(stderr, "MUSTER_NCCL_UNIQUE_ID: not hex at digit %zu\n", 2 * i);
      exit(EXIT_FAILURE);
    }
    id->internal[i] = (char)(hi << 4 | lo);
  }
}

/* loop all-reduces for ever, a heartbeat before each: the rank that never
 * enters one is the one the others wait for. */
static void loop(ncclComm_t comm, float *sendbuff, float *recvbuff, size_t count, cudaStream_t stream, int rank) {
  const char *beat = getenv("MUSTER_HEARTBEAT_FILE");
  long step;
  printf("rank %d pid %d looping\n", rank, (int)getpid());
  fflush(stdout);
  for (step = 1;; step++) {
    if (beat != NULL) utimensat(AT_FDCWD, beat, NULL, 0);
    NCCLCHECK(ncclAllReduce(sendbuff, recvbuff, count, ncclFloat, ncclSum, comm, stream));
    CUDACHECK(cudaStreamSynchronize(stream));
    if (step % 100 == 0) {
      printf("rank %d step %ld\n", rank, step);
      fflush(stdout);
    }
  }
}

int main(int argc, char **argv) {
  const size_t count = 32 * 1024 * 1024;
  int rank = env_int("RANK");
  int nranks = env_int("WORLD_SIZE");
  int local_rank = env_int("LOCAL_RANK");
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t stream;
  float *sendbuff, *recvbuff, *host;
  size_t i, wrong = 0;

  unique_id_from_env(&id);

  /* CUDA_VISIBLE_DEVICES lists the job's GPUs; ours is the LOCAL_RANK-th. */
  CUDACHECK(cudaSetDevice(local_rank));
  CUDACHECK(cudaMalloc((void **)&sendbuff, count * sizeof(float)));
  CUDACHECK(cudaMalloc((void **)&recvbuff, count * sizeof(float)));
  CUDACHECK(cudaStreamCreate(&stream));

  /* Element i of rank r is r + (i % 7): the sum tells if any rank is missing. */
  host = (float *)malloc(count * sizeof(float));
  if (host == NULL) {
    fprintf(stderr, "out of host memory\n");
    return EXIT_FAILURE;
  }
  for (i = 0; i < count; i++) host[i] = (float)rank + (float)(i % 7);
  CUDACHECK(cudaMemcpy(sendbuff, host, count * sizeof(float), cudaMemcpyHostToDevice));

  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  if (argc > 1 && strcmp(argv[1], "--loop") == 0) loop(comm, sendbuff, recvbuff, 1 << 20, stream, rank);
  NCCLCHECK(ncclAllReduce(sendbuff, recvbuff, count, ncclFloat, ncclSum, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));

  CUDACHECK(cudaMemcpy(host, recvbuff, count * sizeof(float), cudaMemcpyDeviceToHost));
  for (i = 0; i < count; i++) {
    /* sum over r of (r + i%7) = n(n-1)/2 + n*(i%7), exact in float */
    float want = (float)nranks * (float)(nranks - 1) / 2 + (float)nranks * (float)(i % 7);
    if (fabsf(host[i] - want) > 1e-3f) {
      if (wrong < 5) fprintf(stderr, "rank %d: element %zu is %g, want %g\n", rank, i, host[i], want);
      wrong++;
    }
  }

  CUDACHECK(cudaFree(sendbuff));
  CUDACHECK(cudaFree(recvbuff));
  CUDACHECK(cudaStreamDestroy(stream));
  NCCLCHECK(ncclCommDestroy(comm));
  free(host);

  if (wrong) {
    fprintf(stderr, "rank %d: %zu of %zu elements wrong\n", rank, wrong, count);
    return EXIT_FAILURE;
  }
  printf("rank %d of %d (device %d): allreduce of %zu floats correct\n", rank, nranks, local_rank, count);
  return EXIT_SUCCESS;
}
