// The slice of Huawei's DCMI C API (libdcmi.so, the Ascend driver's management library) the
// Ascend plugin uses for telemetry, declared from the public dcmi_interface_api.h (names,
// argument order, struct layouts) and the CANN documentation (return codes), so the plugin
// builds without Ascend software and loads the library at run time with dlopen.
#ifndef RAYACCEL_PLUGINS_ASCEND_DCMI_H_
#define RAYACCEL_PLUGINS_ASCEND_DCMI_H_

#ifdef __cplusplus
extern "C" {
#endif

#define DCMI_OK 0
#define DCMI_ERROR_CODE_BASE (-8000)
#define DCMI_ERR_CODE_INVALID_PARAMETER (DCMI_ERROR_CODE_BASE - 1)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID (DCMI_ERROR_CODE_BASE - 7)
#define DCMI_ERR_CODE_DEVICE_NOT_EXIST (DCMI_ERROR_CODE_BASE - 8)
#define DCMI_ERR_CODE_NOT_REDAY (DCMI_ERROR_CODE_BASE - 12) /* sic: not initialized yet */
#define DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER (DCMI_ERROR_CODE_BASE - 13)
#define DCMI_ERR_CODE_NOT_SUPPORT (DCMI_ERROR_CODE_BASE - 255)

/* dcmi_get_device_utilization_rate's input_type (CANN's device types). */
#define DCMI_UTILIZATION_RATE_AICORE 2
#define DCMI_UTILIZATION_RATE_HBM 6

struct dcmi_hbm_info {
  unsigned long long memory_size;  /* MB */
  unsigned int freq;               /* MHz */
  unsigned long long memory_usage; /* MB */
  int temp;
  unsigned int bandwith_util_rate;
};

enum dcmi_device_type {
  DCMI_DEVICE_TYPE_DDR,
  DCMI_DEVICE_TYPE_SRAM,
  DCMI_DEVICE_TYPE_HBM,
  DCMI_DEVICE_TYPE_NPU,
  DCMI_DEVICE_TYPE_NONE = 0xff
};

struct dcmi_ecc_info {
  int enable_flag;
  unsigned int single_bit_error_cnt;
  unsigned int double_bit_error_cnt;
  unsigned int total_single_bit_error_cnt; /* since the device was made: never reset */
  unsigned int total_double_bit_error_cnt;
  unsigned int single_bit_isolated_pages_cnt;
  unsigned int double_bit_isolated_pages_cnt;
  unsigned int single_bit_next_isolated_pages_cnt;
  unsigned int double_bit_next_isolated_pages_cnt;
};

int dcmi_init(void);
/* The chip behind /dev/davinci<phy id>: its card and its device on that card. */
int dcmi_get_card_id_device_id_from_phyid(int *card_id, int *device_id, unsigned int device_phy_id);
int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type,
                                     unsigned int *utilization_rate);
int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info);
int dcmi_get_device_power_info(int card_id, int device_id, int *power);        /* 0.1 W */
int dcmi_get_device_temperature(int card_id, int device_id, int *temperature); /* C */
int dcmi_get_device_ecc_info(int card_id, int device_id, enum dcmi_device_type input_type,
                             struct dcmi_ecc_info *device_ecc_info);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RAYACCEL_PLUGINS_ASCEND_DCMI_H_ */
