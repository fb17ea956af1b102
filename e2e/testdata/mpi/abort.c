/* Rank 1 calls MPI_Abort(MPI_COMM_WORLD, 7); the others wait in a barrier
 * that never completes, until the process manager stops them. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("rank %d up\n", rank);
    fflush(stdout);
    if (rank == 1)
        MPI_Abort(MPI_COMM_WORLD, 7);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
