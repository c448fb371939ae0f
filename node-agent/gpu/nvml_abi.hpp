#pragma once
// The slice of NVML's C ABI that topo-agent uses, declared here so that the
// build needs no NVIDIA header. Names in comments are the NVML API names
// (NVML API Reference, nvml.h); the values are those documented there.
// Shared by NvmlBackend (which dlopens libnvidia-ml.so.1) and the fake NVML
// library of the tests.

#include <cstdint>

namespace topo::agent::gpu::nvml_abi {

using Return = int;                                  // nvmlReturn_t
inline constexpr Return kSuccess = 0;                // NVML_SUCCESS
inline constexpr Return kErrorUninitialized = 1;     // NVML_ERROR_UNINITIALIZED
inline constexpr Return kErrorInvalidArgument = 2;   // NVML_ERROR_INVALID_ARGUMENT
inline constexpr Return kErrorNotSupported = 3;      // NVML_ERROR_NOT_SUPPORTED
inline constexpr Return kErrorNotFound = 6;          // NVML_ERROR_NOT_FOUND
inline constexpr Return kErrorInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
inline constexpr Return kErrorDriverNotLoaded = 9;   // NVML_ERROR_DRIVER_NOT_LOADED
inline constexpr Return kErrorTimeout = 10;          // NVML_ERROR_TIMEOUT
inline constexpr Return kErrorGpuIsLost = 15;        // NVML_ERROR_GPU_IS_LOST
inline constexpr Return kErrorUnknown = 999;         // NVML_ERROR_UNKNOWN

struct DeviceOpaque;    // behind nvmlDevice_t
struct EventSetOpaque;  // behind nvmlEventSet_t
using Device = DeviceOpaque*;
using EventSet = EventSetOpaque*;

// nvmlMemory_t (v1): bytes
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlEventData_t
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the XID number for XID events
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

inline constexpr unsigned long long kEventTypeDoubleBitEccError =
    0x2;  // nvmlEventTypeDoubleBitEccError
inline constexpr unsigned long long kEventTypeXidCriticalError =
    0x8;  // nvmlEventTypeXidCriticalError

inline constexpr int kTemperatureGpu = 0;        // NVML_TEMPERATURE_GPU (nvmlTemperatureSensors_t)
inline constexpr int kMemoryErrorCorrected = 0;  // NVML_MEMORY_ERROR_TYPE_CORRECTED
inline constexpr int kMemoryErrorUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
inline constexpr int kVolatileEcc = 0;             // NVML_VOLATILE_ECC (nvmlEccCounterType_t)

// nvmlClocksThrottleReason*: the thermal ones
inline constexpr unsigned long long kThrottleSwThermal = 0x20;  // ...SwThermalSlowdown
inline constexpr unsigned long long kThrottleHwThermal = 0x40;  // ...HwThermalSlowdown

inline constexpr unsigned kBufferSize = 96;  // enough for NVML's name and UUID buffers

// Function signatures, each named after the NVML function it points to.
using InitV2Fn = Return (*)();                                          // nvmlInit_v2
using ShutdownFn = Return (*)();                                        // nvmlShutdown
using ErrorStringFn = const char* (*)(Return);                          // nvmlErrorString
using DeviceGetCountV2Fn = Return (*)(unsigned int*);                   // nvmlDeviceGetCount_v2
using DeviceGetHandleByIndexV2Fn = Return (*)(unsigned int, Device*);   // ..._v2
using DeviceGetNameFn = Return (*)(Device, char*, unsigned int);        // nvmlDeviceGetName
using DeviceGetUuidFn = Return (*)(Device, char*, unsigned int);        // nvmlDeviceGetUUID
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);              // nvmlDeviceGetMemoryInfo
using DeviceGetTemperatureFn = Return (*)(Device, int, unsigned int*);  // nvmlDeviceGetTemperature
using DeviceGetThrottleReasonsFn = Return (*)(Device, unsigned long long*);
// ^ nvmlDeviceGetCurrentClocksThrottleReasons
using DeviceGetTotalEccErrorsFn = Return (*)(Device, int, int, unsigned long long*);
// ^ nvmlDeviceGetTotalEccErrors(device, nvmlMemoryErrorType_t, nvmlEccCounterType_t, count)
using EventSetCreateFn = Return (*)(EventSet*);  // nvmlEventSetCreate
using DeviceRegisterEventsFn = Return (*)(Device, unsigned long long, EventSet);
// ^ nvmlDeviceRegisterEvents
using EventSetWaitV2Fn = Return (*)(EventSet, EventData*, unsigned int);  // nvmlEventSetWait_v2
using EventSetFreeFn = Return (*)(EventSet);                              // nvmlEventSetFree

}  // namespace topo::agent::gpu::nvml_abi
