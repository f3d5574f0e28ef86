#pragma once
/// \brief Superseded by device_mesh.hpp (DeviceMesh: one MeshDim per group, each with its
/// MPI sub-communicator and its Communicator). Kept only so that train/cost_model.cpp,
/// which calls parallel::make_communicator, builds while another branch rewrites it;
/// include device_mesh.hpp instead. To be deleted once cost_model.cpp includes it.

#include "meshtrain/parallel/device_mesh.hpp"
