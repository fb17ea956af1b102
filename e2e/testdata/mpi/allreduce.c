/* Each rank prints its rank and size, checks MPI_Allreduce of the ranks,
 * meets at MPI_Barrier and exits 0 when the sum is right. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, sum = -1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    int want = size * (size - 1) / 2;
    printf("rank %d of %d: allreduce %d want %d\n", rank, size, sum, want);
    fflush(stdout);
    MPI_Finalize();
    return sum == want ? 0 : 1;
}
