// The slice of Habana's HLML C API (libhlml.so, the NVML of Gaudi) the Gaudi plugin uses,
// declared from Habana's public hlml.h (names, return codes, event bits, struct layouts), so
// the plugin builds without Habana software and loads the library at run time with dlopen.
#ifndef RAYACCEL_PLUGINS_GAUDI_HLML_H_
#define RAYACCEL_PLUGINS_GAUDI_HLML_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef int hlml_return_t;
enum {
  HLML_SUCCESS = 0,
  HLML_ERROR_UNINITIALIZED = 1,
  HLML_ERROR_INVALID_ARGUMENT = 2,
  HLML_ERROR_NOT_SUPPORTED = 3,
  HLML_ERROR_ALREADY_INITIALIZED = 5,
  HLML_ERROR_NOT_FOUND = 6,
  HLML_ERROR_INSUFFICIENT_SIZE = 7,
  HLML_ERROR_DRIVER_NOT_LOADED = 9,
  HLML_ERROR_TIMEOUT = 10,
  HLML_ERROR_AIP_IS_LOST = 15,
  HLML_ERROR_MEMORY = 20,
  HLML_ERROR_NO_DATA = 21,
  HLML_ERROR_UNKNOWN = 49
};

/* Event bits for hlml_device_register_events. */
#define HLML_EVENT_ECC_DERR (1ULL << 0)
#define HLML_EVENT_CRITICAL_ERR (1ULL << 1)
#define HLML_EVENT_CLOCK_RATE (1ULL << 2)
#define HLML_EVENT_DRAM_ERR (1ULL << 3)
#define HLML_EVENT_ECC_SERR (1ULL << 4)

typedef void* hlml_device_t;
typedef void* hlml_event_set_t;

#define HLML_PCI_ADDR_LEN 15 /* "dddd:bb:dd.f" and its NUL */

typedef struct hlml_pci_cap {
  char link_speed[10];
  char link_width[10];
} hlml_pci_cap_t;

typedef struct hlml_pci_info {
  unsigned int bus;
  char bus_id[HLML_PCI_ADDR_LEN]; /* "domain:bus:device.function" */
  unsigned int device;
  unsigned int domain;
  unsigned int pci_device_id;
  hlml_pci_cap_t caps;
} hlml_pci_info_t;

typedef struct hlml_event_data {
  hlml_device_t device;
  unsigned long long event_type;
} hlml_event_data_t;

hlml_return_t hlml_init(void);
hlml_return_t hlml_shutdown(void);
hlml_return_t hlml_device_get_count(unsigned int* device_count);
hlml_return_t hlml_device_get_handle_by_index(unsigned int index, hlml_device_t* device);
hlml_return_t hlml_device_get_pci_info(hlml_device_t device, hlml_pci_info_t* pci);
hlml_return_t hlml_device_get_serial(hlml_device_t device, char* serial, unsigned int length);
hlml_return_t hlml_event_set_create(hlml_event_set_t* set);
hlml_return_t hlml_event_set_free(hlml_event_set_t set);
hlml_return_t hlml_device_register_events(hlml_device_t device, unsigned long long event_types,
                                          hlml_event_set_t set);
hlml_return_t hlml_event_set_wait(hlml_event_set_t set, hlml_event_data_t* data,
                                  unsigned int timeout_ms);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RAYACCEL_PLUGINS_GAUDI_HLML_H_ */
