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

/* Telemetry (hlml_device_get_*). Units as HLML documents them: memory in bytes, power in mW,
 * temperature in degrees C. */
typedef struct hlml_utilization {
  unsigned int aip; /* percent of the last period the AIP (the chip's compute) was busy */
} hlml_utilization_t;

typedef struct hlml_memory {
  unsigned long long free;
  unsigned long long total;
  unsigned long long used;
} hlml_memory_t;

typedef enum hlml_temperature_sensors {
  HLML_TEMPERATURE_ON_AIP = 0,
  HLML_TEMPERATURE_ON_BOARD = 1,
  HLML_TEMPERATURE_OTHER = 2
} hlml_temperature_sensors_t;

typedef enum hlml_memory_error_type {
  HLML_MEMORY_ERROR_TYPE_CORRECTED = 0, /* HLML answers HLML_ERROR_NOT_SUPPORTED */
  HLML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
} hlml_memory_error_type_t;

typedef enum hlml_ecc_counter_type {
  HLML_VOLATILE_ECC = 0, /* since the driver loaded */
  HLML_AGGREGATE_ECC = 1
} hlml_ecc_counter_type_t;

typedef enum hlml_row_replacement_cause {
  HLML_ROW_REPLACEMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0,
  HLML_ROW_REPLACEMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
} hlml_row_replacement_cause_t;

typedef struct hlml_row_address {
  unsigned char hbm_idx;
  unsigned char pc;
  unsigned char sid;
  unsigned char bank_idx;
  unsigned short row_addr;
} hlml_row_address_t;

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
hlml_return_t hlml_device_get_utilization_rates(hlml_device_t device,
                                                hlml_utilization_t* utilization);
hlml_return_t hlml_device_get_memory_info(hlml_device_t device, hlml_memory_t* memory);
hlml_return_t hlml_device_get_power_usage(hlml_device_t device, unsigned int* power);
hlml_return_t hlml_device_get_temperature(hlml_device_t device,
                                          hlml_temperature_sensors_t sensor_type,
                                          unsigned int* temp);
hlml_return_t hlml_device_get_total_ecc_errors(hlml_device_t device,
                                               hlml_memory_error_type_t error_type,
                                               hlml_ecc_counter_type_t counter_type,
                                               unsigned long long* ecc_counts);
/* With addresses NULL: the count alone. */
hlml_return_t hlml_device_get_replaced_rows(hlml_device_t device,
                                            hlml_row_replacement_cause_t cause,
                                            unsigned int* row_count, hlml_row_address_t* addresses);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RAYACCEL_PLUGINS_GAUDI_HLML_H_ */
