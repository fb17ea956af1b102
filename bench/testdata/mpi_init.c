/* MPI_Init and MPI_Finalize, nothing between: what starting an MPI job costs. */
#include <mpi.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Finalize();
    return 0;
}
